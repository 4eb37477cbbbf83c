// What the two before-pool gradients of the cpu conv group share (the weight
// gradient, conv_group_wgrad_pooled_cpu.cpp, and the data gradient,
// conv_group_dgrad_pooled_cpu.cpp): 64-byte aligned scratch, and reading a
// 2x2 max-pool's gradient one window at a time, either from the full-size dY
// (N, H, W, O) bf16 NHWC, which tells the window's one nonzero per channel
// from a dY that is not a pool's gradient (two nonzeros in a window, or one
// outside every window), or from the pooled gradient and the argmax codes
// (N, H/2, W/2, O) that the fused pool + BN + activation backward hands over
// without writing the full-size dY at all.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "dbf_common.cuh"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#endif

DBF_NAMESPACE_BEGIN
namespace cpu {
namespace pooled {

// 64-byte aligned fp32 scratch, zeroed (std::vector's is 16-byte aligned, and
// a vector load split over two cache lines costs two).
struct Scratch {
  float* p;
  explicit Scratch(size_t n) : p(static_cast<float*>(std::aligned_alloc(64, (n + 15) / 16 * 64))) {
    std::fill(p, p + (n + 15) / 16 * 16, 0.f);
  }
  ~Scratch() { std::free(p); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

#if defined(__AVX512F__) && defined(__AVX512BW__)

// Lanes whose bf16 is not +-0.
inline __mmask32 nonzero(__m512i v) { return _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x7fff)); }

// One 2x2 window of dY for the k = popcount(m) channels from the window's
// top-left element p00 (row: the elements between two rows of the map): its
// four values in row-major order (d), the channels nonzero at each (z), and
// the channels with more than one nonzero (bad).
struct Window {
  __m512i d[4];
  __mmask32 z[4];
  __mmask32 bad;
};

inline Window window_at(const uint16_t* p00, long long O, long long row, __mmask32 m) {
  Window w;
  w.d[0] = _mm512_maskz_loadu_epi16(m, p00);
  w.d[1] = _mm512_maskz_loadu_epi16(m, p00 + O);
  w.d[2] = _mm512_maskz_loadu_epi16(m, p00 + row);
  w.d[3] = _mm512_maskz_loadu_epi16(m, p00 + row + O);
  for (int k = 0; k < 4; k++) w.z[k] = nonzero(w.d[k]);
  w.bad = (w.z[0] & (w.z[1] | w.z[2] | w.z[3])) | (w.z[1] & (w.z[2] | w.z[3])) | (w.z[2] & w.z[3]);
  return w;
}

// The same window read from the pool's own gradient instead of the full-size
// dY: dp (the pooled gradient, one value per window and channel) and codes
// (the forward's argmax 0..3 of each window, bn_act_pool_cpu.cpp), both at
// the window's pooled position. d[q] is dp where the code is q and +0
// elsewhere, which is what the full-size dY holds there (the pool's backward
// writes zeros off the argmax), so everything read from it is the same bits.
inline Window window_from_pooled(const uint16_t* dp, const uint8_t* codes, __mmask32 m) {
  Window w;
  const __m512i d = _mm512_maskz_loadu_epi16(m, dp);
  const __m256i c = _mm256_maskz_loadu_epi8(m, codes);
  for (int k = 0; k < 4; k++) {
    w.d[k] = _mm512_maskz_mov_epi16(_mm256_cmpeq_epi8_mask(c, _mm256_set1_epi8((char)k)), d);
    w.z[k] = nonzero(w.d[k]);
  }
  w.bad = 0;
  return w;
}

// Whether image img (H, W, O) has a nonzero in channels [oa, ob) on the last
// row or column of an odd map, which belong to no window.
inline bool nonzero_outside_windows(const uint16_t* img, int H, int W, int O, int oa, int ob) {
  const int Hp = H / 2, Wp = W / 2;
  __mmask32 bad = 0;
  for (int y = 0; y < H; y++)
    for (int x = (y < 2 * Hp ? 2 * Wp : 0); x < W; x++)
      for (int c = oa; c < ob; c += 32) {
        const int k = std::min(32, ob - c);
        const __mmask32 m = k == 32 ? ~0u : (1u << k) - 1;
        bad |= nonzero(_mm512_maskz_loadu_epi16(m, img + ((long long)y * W + x) * O + c));
      }
  return bad != 0;
}

#endif

}  // namespace pooled
}  // namespace cpu
DBF_NAMESPACE_END
