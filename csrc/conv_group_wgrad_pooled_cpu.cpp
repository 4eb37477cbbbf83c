// Weight gradient of a 3x3, stride-1, padding-1 convolution whose output goes
// straight into a 2x2 / stride-2 max-pool (the first conv of each group of the
// CIFAR net). The pool's backward leaves at most one nonzero per window and
// channel in dY, so three quarters (or more, with an odd map's dropped last
// row and column) of the products the dense kernel (conv_group_wgrad_cpu.cpp)
// computes are products with zero. This one sums only the window's nonzero:
//
//   dW[o, tap, i] = sum over images and pooled positions q of
//                   v[q, o] * x[pos(q, o) + tap, i]
//
// where v is the window's one value and pos its place. pos depends on the
// output channel, so there is nothing to pair for vdpbf16ps without a shuffle
// per product: the sums are fp32 FMAs over x converted to fp32 (one FMA per
// loaded vector, so the loop runs at the load rate, which is half
// vdpbf16ps's multiply rate on a 256-bit-datapath core, for a quarter of the
// work: about twice the dense kernel's speed).
//
// Each thread owns a contiguous range of output channels for the whole call,
// and every (o, tap, i) sums the images and windows in the same order, so the
// result is the same on any thread count and on every run. A window with two
// nonzeros in one channel (dY not from a 2x2 max-pool) makes the call return
// 2 and the caller run the dense kernel.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "conv_group_pooled_cpu.h"
#include "cpu_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define DBF_POOLED_BUILT 1
#else
#define DBF_POOLED_BUILT 0
#endif

DBF_NAMESPACE_BEGIN
namespace cpu {

#if DBF_POOLED_BUILT
namespace {

// Bytes of one 16-channel plane of a thread's chunk of images (fp32 x): a
// quarter of an L2. Every tile of the thread's output channels walks one plane
// before the next plane starts, so the plane is read from L2, not L3; the
// chunk's other planes, window values and offsets only have to fit in memory.
// Against a chunk of 768 KB for all planes and the planes cycled inside each
// tile (one thread, 384 images, 2026-11-25): 256->256 @7 52.8 -> 46 ms,
// 64->256 @15 62 -> 60 ms, 24->64 @31 unchanged.
constexpr long long kPlaneBytes = 256 << 10;
constexpr int kOT = 2;  // output channels per register tile: 2 x 9 taps = 18 zmm

// Images [n0, n0 + nc) of x (N, H, W, I) bf16 into xf (ceil(I / 16), nc,
// H + 2, W + 2, 16) fp32: one plane per 16 input channels, so that a tile's
// loads (one 16-channel block) walk consecutive cache lines (1.3x on the call
// against pixel-major), every one 64-byte aligned (a load split over two lines
// costs two: 1.7x). The one-pixel border and the channels past I stay the
// zeros xf was created with.
void pad_to_fp32(const uint16_t* x, float* xf, int n0, int nc, int H, int W, int I) {
  const long long plane = (long long)nc * (H + 2) * (W + 2) * 16;
  for (int n = 0; n < nc; n++)
    for (int y = 0; y < H; y++)
      for (int px = 0; px < W; px++) {
        const uint16_t* src = x + (((long long)(n0 + n) * H + y) * W + px) * I;
        float* dst = xf + (((long long)n * (H + 2) + y + 1) * (W + 2) + px + 1) * 16;
        for (int c = 0; c < I; c += 16) {
          const __mmask16 m = I - c >= 16 ? 0xffff : (__mmask16)((1u << (I - c)) - 1);
          const __m256i h = _mm256_maskz_loadu_epi16(m, src + c);
          _mm512_store_ps(dst + c / 16 * plane,
                          _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
        }
      }
}

using pooled::Scratch;

// For images [n0, n0 + nc), channels [oa, ob): v (tile, item, kOT) fp32 = the
// window's nonzero of dY (or a zero), off = the element offset in xf's plane
// of the 3x3 neighbourhood's top-left corner around it. dy is the full-size
// gradient, or with codes the pooled one (conv_group_pooled_cpu.h). Returns
// false where a window holds two nonzeros in one channel or a pixel outside
// every window is nonzero.
bool compact(const uint16_t* dy, const uint8_t* codes, float* v, int32_t* off, int n0, int nc,
             int H, int W, int O, int oa, int ob) {
  const int Hp = H / 2, Wp = W / 2;
  const long long items = (long long)nc * Hp * Wp;
  const __m512i step = _mm512_mullo_epi64(_mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi64(items));
  const int32_t row = (W + 2) * 16;
  __mmask32 bad = 0;
  for (int n = 0; n < nc; n++) {
    const uint16_t* img = dy + (long long)(n0 + n) * (codes ? Hp * Wp : H * W) * O;
    for (int hp = 0; hp < Hp; hp++)
      for (int wp = 0; wp < Wp; wp++) {
        const long long q = ((long long)n * Hp + hp) * Wp + wp;
        const long long at_pooled = (((long long)(n0 + n) * Hp + hp) * Wp + wp) * O;
        const uint16_t* p00 = img + (codes ? 0 : ((long long)(2 * hp) * W + 2 * wp) * O);
        const int32_t base = (int32_t)((((long long)n * (H + 2) + 2 * hp) * (W + 2) + 2 * wp) * 16);
        for (int c = oa; c < ob; c += 32) {
          const int k = std::min(32, ob - c);
          const __mmask32 m = k == 32 ? ~0u : (1u << k) - 1;
          const pooled::Window win =
              codes ? pooled::window_from_pooled(dy + at_pooled + c, codes + at_pooled + c, m)
                    : pooled::window_at(p00 + c, O, (long long)W * O, m);
          const __mmask32 z1 = win.z[1], z2 = win.z[2], z3 = win.z[3];
          bad |= win.bad;
          __m512i s = _mm512_mask_mov_epi16(win.d[0], z1, win.d[1]);
          s = _mm512_mask_mov_epi16(s, z2, win.d[2]);
          s = _mm512_mask_mov_epi16(s, z3, win.d[3]);
          const __mmask32 down = z2 | z3, right = z1 | z3;
          const __m512i vb = _mm512_set1_epi32(base), vr = _mm512_set1_epi32(row);
          const __m512i vi = _mm512_set1_epi32(16);
          for (int h = 0; h < 2 && 16 * h < k; h++) {
            const __mmask16 mh = (__mmask16)(m >> (16 * h));
            const __mmask16 dn = (__mmask16)(down >> (16 * h)), rt = (__mmask16)(right >> (16 * h));
            const __m256i half = h ? _mm512_extracti64x4_epi64(s, 1) : _mm512_castsi512_si256(s);
            const __m512 val = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
            __m512i o = _mm512_mask_add_epi32(vb, dn, vb, vr);
            o = _mm512_mask_add_epi32(o, rt, o, vi);
            // Tile-major (tile, item, kOT), so that the tile loop reads v and
            // off as two sequential streams: each channel pair is one 8-byte
            // element of a scatter (kOT = 2).
            const __mmask8 pairs = (__mmask8)_pext_u32(mh, 0x5555);
            const __m512i at = _mm512_add_epi64(
                _mm512_set1_epi64((long long)(c - oa + 16 * h) / kOT * items + q), step);
            _mm512_mask_i64scatter_pd(v, pairs, at, _mm512_castps_pd(val), 8);
            _mm512_mask_i64scatter_pd(off, pairs, at, _mm512_castsi512_pd(o), 8);
          }
        }
      }
    // The last row and column of an odd map belong to no window: zero gradient.
    if (!codes && pooled::nonzero_outside_windows(img, H, W, O, oa, ob)) bad = 1;
  }
  return bad == 0;
}

// 16 (zmm) or 8 (ymm) fp32 lanes: a plane's last block of 8 channels or
// fewer (the net's 24 input channels: 16 + 8) takes half-width FMAs, the same
// sums in the same order at half the cost.
template <int LANES> struct Lanes;
template <> struct Lanes<16> {
  using V = __m512;
  using M = __mmask16;
  static V load(const float* p) { return _mm512_load_ps(p); }
  static V load(M m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, M m, V v) { _mm512_mask_storeu_ps(p, m, v); }
  static V splat(float f) { return _mm512_set1_ps(f); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
};
template <> struct Lanes<8> {
  using V = __m256;
  using M = __mmask8;
  static V load(const float* p) { return _mm256_load_ps(p); }
  static V load(M m, const float* p) { return _mm256_maskz_loadu_ps(m, p); }
  static void store(float* p, M m, V v) { _mm256_mask_storeu_ps(p, m, v); }
  static V splat(float f) { return _mm256_set1_ps(f); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
};

// dw[o, tap, i0 : i0 + LANES] (masked past I) for the kOT outputs from o0 +=
// the sum over items [0, items) of v * xf[off + tap] (v, off: this tile's
// (item, kOT) block; xf: the plane of channels i0 .. i0 + 15).
template <int LANES>
void tile(const float* xf, const float* v, const int32_t* off, float* dw, int items, int o0, int i0,
          int W, int I, typename Lanes<LANES>::M mask) {
  using L = Lanes<LANES>;
  typename L::V acc[kOT][9];
  for (int t = 0; t < kOT; t++)
    for (int tap = 0; tap < 9; tap++)
      acc[t][tap] = L::load(mask, dw + ((long long)(o0 + t) * 9 + tap) * I + i0);
  const long long row = (long long)(W + 2) * 16;
  for (int q = 0; q < items; q++)
    for (int t = 0; t < kOT; t++) {
      const typename L::V s = L::splat(v[q * kOT + t]);
      const float* b = xf + off[q * kOT + t];
      for (int kh = 0; kh < 3; kh++)
        for (int kw = 0; kw < 3; kw++)
          acc[t][kh * 3 + kw] = L::fma(s, L::load(b + kh * row + kw * 16), acc[t][kh * 3 + kw]);
    }
  for (int t = 0; t < kOT; t++)
    for (int tap = 0; tap < 9; tap++)
      L::store(dw + ((long long)(o0 + t) * 9 + tap) * I + i0, mask, acc[t][tap]);
}

}  // namespace

int conv3x3_wgrad_pooled(const uint16_t* x, const uint16_t* dy, const uint8_t* codes, float* dw,
                         int N, int H, int W, int I, int O) {
  if (O % 16 != 0 || N < 1 || H < 2 || W < 2 || I < 1) return 1;
  const int Hp = H / 2, Wp = W / 2, tiles = O / kOT;
  std::atomic<bool> sparse{true};
#pragma omp parallel
  {
    const int T = omp_get_num_threads(), th = omp_get_thread_num();
    const int a = (int)((long long)tiles * th / T), b = (int)((long long)tiles * (th + 1) / T);
    const int oa = a * kOT, ob = b * kOT, L = ob - oa;
    const int nib = (I + 15) / 16;
    const long long plane_per_image = 4LL * (H + 2) * (W + 2) * 16;
    const int chunk = (int)std::max(1LL, std::min<long long>(N, kPlaneBytes / plane_per_image));
    Scratch xf((size_t)chunk * (H + 2) * (W + 2) * 16 * nib);
    std::vector<float> v((size_t)chunk * Hp * Wp * std::max(L, 1));
    std::vector<int32_t> off(v.size());
    std::fill(dw + (long long)oa * 9 * I, dw + (long long)ob * 9 * I, 0.f);
    for (int n0 = 0; n0 < N && L > 0; n0 += chunk) {
      const int nc = std::min(chunk, N - n0);
      pad_to_fp32(x, xf.p, n0, nc, H, W, I);
      if (!compact(dy, codes, v.data(), off.data(), n0, nc, H, W, O, oa, ob)) sparse = false;
      const long long plane = (long long)nc * (H + 2) * (W + 2) * 16;
      const int items = nc * Hp * Wp;
      for (int i0 = 0; i0 < I; i0 += 16)
        for (int tl = a; tl < b; tl++) {
          const int k = std::min(16, I - i0);
          const unsigned m = (1u << k) - 1;
          const long long at = (long long)(tl - a) * items * kOT;
          if (k > 8)
            tile<16>(xf.p + i0 / 16 * plane, v.data() + at, off.data() + at, dw, items, tl * kOT,
                     i0, W, I, (__mmask16)m);
          else
            tile<8>(xf.p + i0 / 16 * plane, v.data() + at, off.data() + at, dw, items, tl * kOT, i0,
                    W, I, (__mmask8)m);
        }
    }
  }
  return sparse ? 0 : 2;
}

#else  // a copy built without AVX-512: the dense kernel's own fallback applies

int conv3x3_wgrad_pooled(const uint16_t*, const uint16_t*, const uint8_t*, float*, int, int, int,
                         int, int) {
  return 1;
}

#endif

}  // namespace cpu
DBF_NAMESPACE_END
