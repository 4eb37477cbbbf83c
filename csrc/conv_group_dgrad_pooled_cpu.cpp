// Data gradient of a 3x3, stride-1, padding-1 convolution whose output goes
// straight into a 2x2 / stride-2 max-pool (the first conv of each group of the
// CIFAR net): the twin of conv_group_wgrad_pooled_cpu.cpp. The pool's
// backward leaves at most one nonzero per window and channel in dY, so oneDNN's
// dense data gradient spends three quarters of its products on zeros. This
// one scatters each nonzero alone:
//
//   dx[n, p + t - 1, i] += v * w[o, i, t]   for the 9 taps t,
//
// where v is the value of window q in channel o and p its place (one of the
// window's four, its code k). The reduction runs over channels whose nonzeros
// sit at different places, so a pair of products for vdpbf16ps costs a
// shuffle. Two forms: the FMA form's sums are fp32 FMAs of a broadcast v
// with the weight row w[o, t, 16 input channels] (one FMA per loaded
// vector; a quarter of the dense work); the pair form (below, where the CPU
// has AVX-512 BF16) pairs two nonzeros of one code into a vdpbf16ps per
// tap, one shuffle each: 0.87-0.88 of the FMA form's time a call on Zen 4
// (docs/results/dgrad-pairs-zen4-0863919), far from the half that the
// products alone would allow.
//
// The 4x4 dx pixels that one window reaches, 16 input channels, are 16 zmm
// accumulators. Each window's nonzeros are listed grouped by code (compact):
// a code fixes which 9 of the 16 accumulators each tap adds to, so the inner
// loop has no branch per nonzero. The weights are read in chunks of 32 output
// channels (18 KB, in L1 while every window of a group of images passes), so
// a window's accumulators are loaded from and stored to an fp32 image of dx
// (with a one-pixel border that takes the taps falling off the map) once per
// chunk. The group (images whose lists and dx images fill about half an L2)
// is what reuses a chunk: one image at a time, 256->256 @7 (9 windows, 2.4 MB
// of fp32 weights) re-read its weights from L3 for every image and ran its
// FMAs at 60% of their peak.
//
// Threads split the images; for each dx element the sum runs over (chunk,
// window, code, channel) in that order whatever the thread count and group,
// so the result is the same on every run. v and w are bf16, so each product is
// exact in fp32 and an FMA rounds as a multiply then an add: the baseline copy
// (one lane at a time, no FMA instruction, the FMA form only) gives the
// AVX-512 copy's FMA-form bits.
// A dY that is not a 2x2 max-pool's gradient makes the call return 2 and the
// caller run the dense data gradient.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bn_act_vec.h"
#include "conv_group_pooled_cpu.h"
#include "cpu_kernels.h"

DBF_NAMESPACE_BEGIN
namespace cpu {
namespace {

constexpr int kLanes = 16;  // input channels per block (one zmm of fp32)
constexpr int kChunk = 32;  // output channels per weight chunk: 32 x 9 x 16 fp32 = 18 KB
constexpr long long kGroupBytes = 512 << 10;  // a group's lists and dx images: half an L2
constexpr int kGroupMax = 16;                 // images per group, at most
constexpr int kRow = 4;     // dx pixels a window reaches along a row (and a column)
constexpr int kTapPairs = 5;  // the pair form's weight rows per output channel (below)
constexpr int kPairRow = 32;  // bf16 of one (o, tap pair) row: 64 bytes
constexpr int kTapPairsWords = kTapPairs * kPairRow;

// One nonzero of dY: its weight rows' offset in a block's plane (o times the
// layout's stride: 9 * 16 fp32, or 5 * 32 bf16 for the pairs) and its value.
struct Entry {
  int32_t woff;
  float v;
};

inline float bf16_value(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// a * b + c: one FMA in the AVX-512 copy; a multiply then an add in the
// baseline one, the same bits where a * b is exact (bf16 x bf16).
inline vec::vf madd(vec::vf a, vec::vf b, vec::vf c) {
#if DBF_VEC
  return _mm512_fmadd_ps(a, b, c);
#else
  return a * b + c;
#endif
}

// Image img (H, W, O) of dY, or with codes (Hp, Wp, O) the pooled gradient
// and its argmax codes (conv_group_pooled_cpu.h): for each window q and chunk
// c, the nonzeros grouped by code (0..3: top-left, top-right, bottom-left,
// bottom-right), channels ascending within a code, at e + (q * chunks + c) *
// kChunk; cnt + (q * chunks + c) * 4 their number per code. False where dY
// is not a 2x2 max-pool's gradient (a window with two nonzeros in a
// channel, or a nonzero on an odd map's last row or column).
bool compact(const uint16_t* img, const uint8_t* codes, int H, int W, int O, int wstride,
             Entry* e, uint8_t* cnt) {
  const int Hp = H / 2, Wp = W / 2, chunks = (O + kChunk - 1) / kChunk;
  const long long row = (long long)W * O;
  bool bad = false;
  for (int hp = 0; hp < Hp; hp++)
    for (int wp = 0; wp < Wp; wp++) {
      const long long pooled_at = ((long long)hp * Wp + wp) * O;
      const uint16_t* p00 = img + (codes ? pooled_at : ((long long)(2 * hp) * W + 2 * wp) * O);
      // where each place's values are: with codes, the one pooled value serves
      // every place (a place's bit is set only where the code names it)
      const uint16_t* at[4] = {p00, p00 + O, p00 + row, p00 + row + O};
      if (codes) at[1] = at[2] = at[3] = p00;
      for (int c = 0; c < chunks; c++) {
        const int o0 = c * kChunk, k = std::min(kChunk, O - o0);
        const long long s = ((long long)hp * Wp + wp) * chunks + c;
        Entry* out = e + s * kChunk;
        uint8_t* ct = cnt + s * 4;
        uint32_t z[4];
#if DBF_VEC
        const __mmask32 m = k == 32 ? ~0u : (1u << k) - 1;
        const pooled::Window win =
            codes ? pooled::window_from_pooled(p00 + o0, codes + pooled_at + o0, m)
                  : pooled::window_at(p00 + o0, O, row, m);
        for (int q = 0; q < 4; q++) z[q] = win.z[q];
        bad |= win.bad != 0;
#else
        for (int q = 0; q < 4; q++) {
          z[q] = 0;
          for (int o = 0; o < k; o++)
            if ((at[q][o0 + o] & 0x7fff) && (!codes || codes[pooled_at + o0 + o] == q))
              z[q] |= 1u << o;
        }
        bad |= ((z[0] & (z[1] | z[2] | z[3])) | (z[1] & (z[2] | z[3])) | (z[2] & z[3])) != 0;
#endif
        if (bad) return false;  // the slots hold one nonzero per channel, no more
        int n = 0;
        for (int q = 0; q < 4; q++) {
          ct[q] = (uint8_t)__builtin_popcount(z[q]);
          for (uint32_t bits = z[q]; bits; bits &= bits - 1) {
            const int o = __builtin_ctz(bits);
            out[n++] = {(o0 + o) * wstride, bf16_value(at[q][o0 + o])};
          }
        }
      }
    }
  if (codes) return true;  // nothing outside the windows: the pooled gradient has no such place
#if DBF_VEC
  return !pooled::nonzero_outside_windows(img, H, W, O, 0, O);
#else
  for (int y = 0; y < H; y++)
    for (int x = (y < 2 * Hp ? 2 * Wp : 0); x < W; x++)
      for (int o = 0; o < O; o++)
        if (img[((long long)y * W + x) * O + o] & 0x7fff) return false;
  return true;
#endif
}

// Window q (row-major over the pooled map) of chunk c: its nonzeros, their
// counts per code and the top-left of its 4x4 dx pixels in buf.
struct Slot {
  const Entry* e;
  const uint8_t* cnt;
  float* buf;
};

inline Slot slot(const Entry* e, const uint8_t* cnt, float* buf, int q, int W, int O, int c) {
  const int Wp = W / 2, chunks = (O + kChunk - 1) / kChunk;
  const long long s = (long long)q * chunks + c;
  return {e + s * kChunk, cnt + s * 4, buf + (2LL * (q / Wp) * (W + 2) + 2 * (q % Wp)) * kLanes};
}

// A window's 4x4 dx pixels (16 lanes each) from buf into acc, and back.
inline void load_window(const float* b, long long row, vec::vf* acc) {
  for (int r = 0; r < kRow; r++)
    for (int x = 0; x < kRow; x++) acc[r * kRow + x] = vec::ld(b + r * row + x * kLanes);
}

inline void store_window(float* b, long long row, const vec::vf* acc) {
  for (int r = 0; r < kRow; r++)
    for (int x = 0; x < kRow; x++) vec::st(b + r * row + x * kLanes, acc[r * kRow + x]);
}

// acc (the window's 4x4 dx pixels, row-major) += each entry's v times its
// weight rows, tap (th, tw) of code K landing on pixel (K / 2 + th, K % 2 + tw).
template <int K>
DBF_HD void scatter(const Entry* e, int n, const float* wl, vec::vf* acc) {
  constexpr int ky = K / 2, kx = K % 2;
  for (int j = 0; j < n; j++) {
    const vec::vf v = vec::splat(e[j].v);
    const float* b = wl + e[j].woff;
    for (int th = 0; th < 3; th++)
      for (int tw = 0; tw < 3; tw++)
        acc[(ky + th) * kRow + kx + tw] =
            madd(v, vec::ld(b + (th * 3 + tw) * kLanes), acc[(ky + th) * kRow + kx + tw]);
  }
}

// One image, one block of 16 input channels, lanes [l, l + vec::L), one
// chunk c of output channels: buf (H + 2, W + 2, 16) fp32 += every window's
// nonzeros in the chunk times the block's weights wl (O, 9, 16).
void accumulate(const Entry* e, const uint8_t* cnt, const float* wl, float* buf, int H, int W,
                int O, int c, int l) {
  const long long row = (long long)(W + 2) * kLanes;
  for (int q = 0; q < H / 2 * (W / 2); q++) {
    const Slot at = slot(e, cnt, buf, q, W, O, c);
    vec::vf acc[kRow * kRow];
    load_window(at.buf + l, row, acc);
    scatter<0>(at.e, at.cnt[0], wl + l, acc);
    scatter<1>(at.e + at.cnt[0], at.cnt[1], wl + l, acc);
    scatter<2>(at.e + at.cnt[0] + at.cnt[1], at.cnt[2], wl + l, acc);
    scatter<3>(at.e + at.cnt[0] + at.cnt[1] + at.cnt[2], at.cnt[3], wl + l, acc);
    store_window(at.buf + l, row, acc);
  }
}

#if DBF_VEC
// The pair form (the default where the CPU has AVX-512 BF16): two nonzeros of
// one code, o and o', share the 9 accumulators their taps land on, so their
// products can pair for vdpbf16ps once their weight rows are interleaved,
// [w(o, i), w(o', i)] per lane. That interleave is the one shuffle per
// product pair the FMA form avoided; it pays because vdpbf16ps makes 32
// products per instruction where an FMA makes 16, and the weight row a
// product reads is bf16 (half the bytes of the FMA form's fp32 row). The
// weights of a block are laid out (o, tap pair, 32 bf16): tap pair p holds
// taps 2p and 2p + 1 (the fifth pair's second is zero), and each 128-bit lane
// L of its 64 bytes holds lanes 4L..4L+3 at tap 2p in its low half, at tap
// 2p + 1 in its high half. vpunpcklwd / vpunpckhwd of two such rows (o, o')
// give the two taps' pairs, in the accumulators' lane order. A code with an
// odd count pairs its last nonzero with a zero. The products are exact in
// fp32 and vdpbf16ps adds them in fp32 (no denormals): not the FMA form's
// bits, within the same bound.
#define DBF_PAIRS_TARGET __attribute__((target("avx512bf16,avx512f,avx512bw")))

bool pairs_supported() { return conv3x3_wgrad_supported(); }  // AVX-512 BF16 in this copy

// w (O, I, 3, 3) bf16 into wp (ceil(I / 16), O, 5, 32) bf16, as above; zeros
// past I and at the tenth tap.
void weights_to_pairs(const uint16_t* w, uint16_t* wp, int I, int O) {
  const int blocks = (I + kLanes - 1) / kLanes;
#pragma omp for schedule(static)
  for (int u = 0; u < blocks * O; u++) {
    const int ib = u / O, o = u % O;
    uint16_t* dst = wp + (long long)u * kTapPairs * kPairRow;
    for (int pr = 0; pr < kTapPairs; pr++)
      for (int word = 0; word < kPairRow; word++) {
        const int lane = word / 8 * 4 + word % 4, t = 2 * pr + word % 8 / 4;
        const int i = ib * kLanes + lane;
        dst[pr * kPairRow + word] = i < I && t < 9 ? w[((long long)o * I + i) * 9 + t] : 0;
      }
  }
}

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// acc += each pair of entries' values times their weight rows (code K's taps).
template <int K>
DBF_PAIRS_TARGET inline void scatter_pairs(const Entry* e, int n, const uint16_t* wl, __m512* acc) {
  constexpr int ky = K / 2, kx = K % 2;
  for (int j = 0; j < n; j += 2) {
    const bool two = j + 1 < n;
    // low half: the first value's bf16 (its float's high bits), high half: the second's
    const uint32_t vv = float_bits(e[j].v) >> 16 | (two ? float_bits(e[j + 1].v) & 0xffff0000u : 0u);
    const __m512bh v = (__m512bh)_mm512_set1_epi32((int)vv);
    const uint16_t* a = wl + e[j].woff;
    const uint16_t* b = wl + (two ? e[j + 1].woff : e[j].woff);
    for (int pr = 0; pr < kTapPairs; pr++) {
      const __m512i ra = _mm512_load_si512(a + pr * kPairRow), rb = _mm512_load_si512(b + pr * kPairRow);
      const int t0 = 2 * pr, t1 = 2 * pr + 1;
      const int p0 = (ky + t0 / 3) * kRow + kx + t0 % 3, p1 = (ky + t1 / 3) * kRow + kx + t1 % 3;
      acc[p0] = _mm512_dpbf16_ps(acc[p0], (__m512bh)_mm512_unpacklo_epi16(ra, rb), v);
      if (t1 < 9) acc[p1] = _mm512_dpbf16_ps(acc[p1], (__m512bh)_mm512_unpackhi_epi16(ra, rb), v);
    }
  }
}

// accumulate's pair form: wl is the block's (O, 5, 32) bf16 rows.
DBF_PAIRS_TARGET void accumulate_pairs(const Entry* e, const uint8_t* cnt, const uint16_t* wl,
                                       float* buf, int H, int W, int O, int c) {
  const long long row = (long long)(W + 2) * kLanes;
  for (int q = 0; q < H / 2 * (W / 2); q++) {
    const Slot at = slot(e, cnt, buf, q, W, O, c);
    __m512 acc[kRow * kRow];
    load_window(at.buf, row, acc);
    scatter_pairs<0>(at.e, at.cnt[0], wl, acc);
    scatter_pairs<1>(at.e + at.cnt[0], at.cnt[1], wl, acc);
    scatter_pairs<2>(at.e + at.cnt[0] + at.cnt[1], at.cnt[2], wl, acc);
    scatter_pairs<3>(at.e + at.cnt[0] + at.cnt[1] + at.cnt[2], at.cnt[3], wl, acc);
    store_window(at.buf, row, acc);
  }
}
#else
bool pairs_supported() { return false; }
#endif

// w (O, I, 3, 3) bf16 into wf (ceil(I / 16), O, 9, 16) fp32, zeros past I.
void weights_to_fp32(const uint16_t* w, float* wf, int I, int O) {
  const int blocks = (I + kLanes - 1) / kLanes;
#pragma omp for schedule(static)
  for (int u = 0; u < blocks * O; u++) {
    const int ib = u / O, o = u % O;
    float* dst = wf + (long long)u * 9 * kLanes;
    for (int lane = 0; lane < kLanes; lane++) {
      const int i = ib * kLanes + lane;
      for (int t = 0; t < 9; t++)
        dst[t * kLanes + lane] = i < I ? bf16_value(w[((long long)o * I + i) * 9 + t]) : 0.f;
    }
  }
}

// buf's interior into image n's dx (H, W, I) bf16, channels [i0, i0 + 16)
// (masked past I), rounded to nearest even.
void store_block(const float* buf, uint16_t* dx, int H, int W, int I, int i0) {
  const int lanes = std::min(kLanes, I - i0);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      const float* src = buf + ((long long)(y + 1) * (W + 2) + x + 1) * kLanes;
      uint16_t* dst = dx + ((long long)y * W + x) * I + i0;
      for (int l = 0; l < lanes; l += vec::L)
        vec::Io<kBF16>::store(dst + l, vec::tail_mask(lanes - l), vec::ld(src + l));
    }
}

}  // namespace

int conv3x3_dgrad_pooled(const uint16_t* dy, const uint8_t* codes, const uint16_t* w, uint16_t* dx,
                         int N, int H, int W, int I, int O, int pairs) {
  if (N < 1 || H < 2 || W < 2 || I < 1 || O < 1) return 1;
  const int Hp = H / 2, Wp = W / 2, chunks = (O + kChunk - 1) / kChunk;
  const int blocks = (I + kLanes - 1) / kLanes;
  const bool use_pairs = pairs && pairs_supported();
  const int wstride = use_pairs ? kTapPairsWords : 9 * kLanes;  // per output channel, in elements
  const long long slots = (long long)Hp * Wp * chunks;
  const long long plane = (long long)(H + 2) * (W + 2) * kLanes;  // one image's dx block, fp32
  const long long per_image = slots * (kChunk * (long long)sizeof(Entry) + 4) + plane * 4;
  const int group = (int)std::max(1LL, std::min<long long>(kGroupMax, kGroupBytes / per_image));
  // fp32 weights for the FMA form, bf16 (two to a float's bytes) for the pairs
  pooled::Scratch wf((size_t)blocks * O * wstride / (use_pairs ? 2 : 1));
  std::atomic<bool> sparse{true};
#pragma omp parallel
  {
    // an omp for: its barrier ends before any image starts
#if DBF_VEC
    if (use_pairs)
      weights_to_pairs(w, reinterpret_cast<uint16_t*>(wf.p), I, O);
    else
#endif
      weights_to_fp32(w, wf.p, I, O);
    std::vector<Entry> e((size_t)group * slots * kChunk);
    std::vector<uint8_t> cnt((size_t)group * slots * 4);
    pooled::Scratch buf((size_t)group * plane);
    const int groups = (N + group - 1) / group;
#pragma omp for schedule(static)
    for (int gi = 0; gi < groups; gi++) {
      const int n0 = gi * group, ng = std::min(group, N - n0);
      for (int g = 0; g < ng; g++)
        if (!sparse.load(std::memory_order_relaxed) ||
            !compact(dy + (long long)(n0 + g) * (codes ? Hp * Wp : H * W) * O,
                     codes ? codes + (long long)(n0 + g) * Hp * Wp * O : nullptr, H, W, O, wstride,
                     e.data() + g * slots * kChunk, cnt.data() + g * slots * 4))
          sparse = false;
      if (!sparse.load(std::memory_order_relaxed)) continue;
      for (int ib = 0; ib < blocks; ib++) {
        std::fill(buf.p, buf.p + (size_t)ng * plane, 0.f);
        const float* wl = wf.p + (long long)ib * O * wstride;  // the block's rows, FMA form
#if DBF_VEC
        const uint16_t* wp = reinterpret_cast<const uint16_t*>(wf.p) + (long long)ib * O * wstride;
#endif
        for (int c = 0; c < chunks; c++)
          for (int g = 0; g < ng; g++) {
            const Entry* eg = e.data() + g * slots * kChunk;
            const uint8_t* cg = cnt.data() + g * slots * 4;
#if DBF_VEC
            if (use_pairs) {
              accumulate_pairs(eg, cg, wp, buf.p + g * plane, H, W, O, c);
              continue;
            }
#endif
            for (int l = 0; l < kLanes; l += vec::L)
              accumulate(eg, cg, wl, buf.p + g * plane, H, W, O, c, l);
          }
        for (int g = 0; g < ng; g++)
          store_block(buf.p + g * plane, dx + (long long)(n0 + g) * H * W * I, H, W, I,
                      ib * kLanes);
      }
    }
  }
  return sparse ? 0 : 2;
}

}  // namespace cpu
DBF_NAMESPACE_END
