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
// sit at different places, so there is no pair of products to give
// vdpbf16ps without a shuffle per product: the sums are fp32 FMAs of a
// broadcast v with the weight row w[o, t, 16 input channels] (one FMA per
// loaded vector, the load rate; a quarter of the dense work: about twice
// oneDNN's dense rate at the same efficiency, as for the weight gradient).
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
// (one lane at a time, no FMA instruction) gives the AVX-512 copy's bits.
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

// One nonzero of dY: its weight rows' offset in a block's plane (o * 9 * 16)
// and its value.
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
bool compact(const uint16_t* img, const uint8_t* codes, int H, int W, int O, Entry* e,
             uint8_t* cnt) {
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
            out[n++] = {(o0 + o) * 9 * kLanes, bf16_value(at[q][o0 + o])};
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
  const int Hp = H / 2, Wp = W / 2, chunks = (O + kChunk - 1) / kChunk;
  const long long row = (long long)(W + 2) * kLanes;
  for (int hp = 0; hp < Hp; hp++)
    for (int wp = 0; wp < Wp; wp++) {
      const long long s = ((long long)hp * Wp + wp) * chunks + c;
      const uint8_t* ct = cnt + s * 4;
      const Entry* es = e + s * kChunk;
      float* b = buf + 2 * hp * row + 2 * wp * kLanes + l;
      vec::vf acc[kRow * kRow];
      for (int r = 0; r < kRow; r++)
        for (int x = 0; x < kRow; x++) acc[r * kRow + x] = vec::ld(b + r * row + x * kLanes);
      scatter<0>(es, ct[0], wl + l, acc);
      scatter<1>(es + ct[0], ct[1], wl + l, acc);
      scatter<2>(es + ct[0] + ct[1], ct[2], wl + l, acc);
      scatter<3>(es + ct[0] + ct[1] + ct[2], ct[3], wl + l, acc);
      for (int r = 0; r < kRow; r++)
        for (int x = 0; x < kRow; x++) vec::st(b + r * row + x * kLanes, acc[r * kRow + x]);
    }
}

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
                         int N, int H, int W, int I, int O) {
  if (N < 1 || H < 2 || W < 2 || I < 1 || O < 1) return 1;
  const int Hp = H / 2, Wp = W / 2, chunks = (O + kChunk - 1) / kChunk;
  const int blocks = (I + kLanes - 1) / kLanes;
  const long long slots = (long long)Hp * Wp * chunks;
  const long long plane = (long long)(H + 2) * (W + 2) * kLanes;  // one image's dx block, fp32
  const long long per_image = slots * (kChunk * (long long)sizeof(Entry) + 4) + plane * 4;
  const int group = (int)std::max(1LL, std::min<long long>(kGroupMax, kGroupBytes / per_image));
  pooled::Scratch wf((size_t)blocks * O * 9 * kLanes);
  std::atomic<bool> sparse{true};
#pragma omp parallel
  {
    weights_to_fp32(w, wf.p, I, O);  // an omp for: its barrier ends before any image starts
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
                     codes ? codes + (long long)(n0 + g) * Hp * Wp * O : nullptr, H, W, O,
                     e.data() + g * slots * kChunk, cnt.data() + g * slots * 4))
          sparse = false;
      if (!sparse.load(std::memory_order_relaxed)) continue;
      for (int ib = 0; ib < blocks; ib++) {
        std::fill(buf.p, buf.p + (size_t)ng * plane, 0.f);
        const float* wl = wf.p + (long long)ib * O * 9 * kLanes;
        for (int c = 0; c < chunks; c++)
          for (int g = 0; g < ng; g++)
            for (int l = 0; l < kLanes; l += vec::L)
              accumulate(e.data() + g * slots * kChunk, cnt.data() + g * slots * 4, wl,
                         buf.p + g * plane, H, W, O, c, l);
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
