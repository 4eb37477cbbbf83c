// Weight gradient of a 3x3, stride-1, padding-1 convolution on bf16 NHWC
// tensors, fp32 accumulation, with AVX-512 BF16's vdpbf16ps (Zen 4/5, Intel
// since Cooper Lake). Why our own: oneDNN's bf16 weight gradient runs at
// 250-390 GFLOP/s on this project's CPU class against 440-560 for the forward
// of the same shapes (benchmarks/bench_conv_shapes.py), and it is a third of
// the training step.
//
// The reduction runs over images and pixels; vdpbf16ps multiplies pairs of
// bf16 along it, so the two images of each pair (2m, 2m+1) are interleaved
// once per call (pair_images: a cheap streaming pass). Pairing images rather
// than neighbouring pixels keeps every tap a plain shift: the border rows and
// columns a tap does not reach are skipped, not multiplied by padding zeros
// (a fifth of the work at 7x7, two fifths at 3x3).
//
// Work: (tap, 64 output channels, 6 input channels) tiles held in 24 zmm
// accumulators while a chunk of image pairs streams past. Each tile belongs to
// one thread for the whole call, so the result is the same on any thread
// count and on every run (the summation order is fixed).
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "cpu_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define DBF_WGRAD_BUILT 1
#define DBF_BF16_TARGET __attribute__((target("avx512bf16,avx512f,avx512bw")))
#else
#define DBF_WGRAD_BUILT 0
#endif

DBF_NAMESPACE_BEGIN
namespace cpu {

#if DBF_WGRAD_BUILT
namespace {

// Paired x + dY bytes streamed past each tile per visit: they stay in a 1 MB
// L2. 512 KB to 1.5 MB measured within noise at batch 1536; 256 KB was 25%
// slower at 256 channels, 7x7. (-DDBF_WGRAD_CHUNK=bytes to measure others.)
#ifndef DBF_WGRAD_CHUNK
#define DBF_WGRAD_CHUNK (768 << 10)
#endif
constexpr long long kChunkBytes = DBF_WGRAD_CHUNK;
constexpr int kTileI = 6;  // input channels per tile (6 x 4 accumulators of 16 outputs = 24 zmm)

// src: (N, P, C) bf16; dst: (ceil(N/2), P, C) uint32, low half image 2m,
// high half image 2m+1 (zero when N is odd).
void pair_images(const uint16_t* src, uint32_t* dst, int N, long long P, int C) {
  const int M = (N + 1) / 2;
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                      39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56,
                                      24, 55, 23, 54, 22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17,
                                      48, 16);
#pragma omp parallel for collapse(2) schedule(static)
  for (int m = 0; m < M; m++)
    for (long long p = 0; p < P; p++) {
      const uint16_t* a = src + ((long long)(2 * m) * P + p) * C;
      const bool has_b = 2 * m + 1 < N;
      const uint16_t* b = a + P * C;
      uint32_t* o = dst + ((long long)m * P + p) * C;
      for (int c = 0; c < C; c += 32) {
        const int n = std::min(32, C - c);
        const __mmask32 k = n == 32 ? ~0u : (1u << n) - 1;
        const __m512i va = _mm512_maskz_loadu_epi16(k, a + c);
        const __m512i vb = has_b ? _mm512_maskz_loadu_epi16(k, b + c) : _mm512_setzero_si512();
        const __mmask16 k0 = n >= 16 ? 0xffff : (1u << n) - 1;
        const __mmask16 k1 = n <= 16 ? 0 : n == 32 ? 0xffff : (1u << (n - 16)) - 1;
        _mm512_mask_storeu_epi32(o + c, k0, _mm512_permutex2var_epi16(va, lo, vb));
        if (k1) _mm512_mask_storeu_epi32(o + c + 16, k1, _mm512_permutex2var_epi16(va, hi, vb));
      }
    }
}

// acc[tap][i][o] += sum over pairs m in [m0, m1), pixels, of dy[o] * x[i]
// (shifted by the tap), for NO x 16 output channels from o0 and NI inputs from i0.
template <int NO, int NI>
DBF_BF16_TARGET void tile(const uint32_t* dyp, const uint32_t* xp, float* acc_out, int m0, int m1,
                          int H, int W, int I, int O, int kh, int kw, int o0, int i0) {
  __m512 acc[NO][NI];
  float* out = acc_out + ((long long)(kh * 3 + kw) * I + i0) * O + o0;
  for (int i = 0; i < NI; i++)
    for (int k = 0; k < NO; k++) acc[k][i] = _mm512_loadu_ps(out + (long long)i * O + 16 * k);
  // Output rows/columns whose input (y + kh - 1, x + kw - 1) lies inside the map.
  const int y0 = kh == 0 ? 1 : 0, y1 = kh == 2 ? H - 1 : H;
  const int x0 = kw == 0 ? 1 : 0, x1 = kw == 2 ? W - 1 : W;
  for (int m = m0; m < m1; m++)
    for (int y = y0; y < y1; y++) {
      const uint32_t* arow = dyp + ((long long)m * H + y) * W * O + o0;
      const uint32_t* xrow = xp + (((long long)m * H + y + kh - 1) * W + kw - 1) * I + i0;
      for (int x = x0; x < x1; x++) {
        __m512bh a[NO];
        for (int k = 0; k < NO; k++)
          a[k] = (__m512bh)_mm512_loadu_si512(arow + (long long)x * O + 16 * k);
        const uint32_t* xq = xrow + (long long)x * I;
        for (int i = 0; i < NI; i++) {
          const __m512bh b = (__m512bh)_mm512_set1_epi32((int)xq[i]);
          for (int k = 0; k < NO; k++) acc[k][i] = _mm512_dpbf16_ps(acc[k][i], a[k], b);
        }
      }
    }
  for (int i = 0; i < NI; i++)
    for (int k = 0; k < NO; k++) _mm512_storeu_ps(out + (long long)i * O + 16 * k, acc[k][i]);
}

template <int NO>
DBF_BF16_TARGET void tile_ni(int ni, const uint32_t* dyp, const uint32_t* xp, float* acc, int m0,
                             int m1, int H, int W, int I, int O, int kh, int kw, int o0, int i0) {
  switch (ni) {
    case 6: tile<NO, 6>(dyp, xp, acc, m0, m1, H, W, I, O, kh, kw, o0, i0); break;
    case 5: tile<NO, 5>(dyp, xp, acc, m0, m1, H, W, I, O, kh, kw, o0, i0); break;
    case 4: tile<NO, 4>(dyp, xp, acc, m0, m1, H, W, I, O, kh, kw, o0, i0); break;
    case 3: tile<NO, 3>(dyp, xp, acc, m0, m1, H, W, I, O, kh, kw, o0, i0); break;
    case 2: tile<NO, 2>(dyp, xp, acc, m0, m1, H, W, I, O, kh, kw, o0, i0); break;
    default: tile<NO, 1>(dyp, xp, acc, m0, m1, H, W, I, O, kh, kw, o0, i0); break;
  }
}

DBF_BF16_TARGET void tile_any(int no, int ni, const uint32_t* dyp, const uint32_t* xp, float* acc,
                              int m0, int m1, int H, int W, int I, int O, int kh, int kw, int o0,
                              int i0) {
  switch (no) {
    case 4: tile_ni<4>(ni, dyp, xp, acc, m0, m1, H, W, I, O, kh, kw, o0, i0); break;
    case 3: tile_ni<3>(ni, dyp, xp, acc, m0, m1, H, W, I, O, kh, kw, o0, i0); break;
    case 2: tile_ni<2>(ni, dyp, xp, acc, m0, m1, H, W, I, O, kh, kw, o0, i0); break;
    default: tile_ni<1>(ni, dyp, xp, acc, m0, m1, H, W, I, O, kh, kw, o0, i0); break;
  }
}

}  // namespace

bool conv3x3_wgrad_supported() {
  static const bool ok = __builtin_cpu_supports("avx512bf16") &&
                         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512f");
  return ok;
}

int conv3x3_wgrad_bf16(const uint16_t* x, const uint16_t* dy, float* dw, uint32_t* xp,
                       uint32_t* dyp, int N, int H, int W, int I, int O) {
  if (!conv3x3_wgrad_supported() || O % 16 != 0 || N < 1 || H < 1 || W < 1 || I < 1) return 1;
  pair_images(x, xp, N, (long long)H * W, I);
  pair_images(dy, dyp, N, (long long)H * W, O);
  std::fill(dw, dw + 9LL * I * O, 0.f);
  const int M = (N + 1) / 2;
  const int nob = (O + 63) / 64, nib = (I + kTileI - 1) / kTileI;
  const int units = 9 * nob * nib;
  const int chunk = (int)std::max(1LL, kChunkBytes / (4LL * H * W * (I + O)));
#pragma omp parallel
  {
    // A contiguous share of the (tap, o block, i block) tiles per thread, the
    // same share on every run: no two threads write the same dw entries.
    const int T = omp_get_num_threads(), t = omp_get_thread_num();
    const int u0 = (int)((long long)units * t / T), u1 = (int)((long long)units * (t + 1) / T);
    for (int m0 = 0; m0 < M; m0 += chunk) {
      const int m1 = std::min(M, m0 + chunk);
      for (int u = u0; u < u1; u++) {
        const int tap = u / (nob * nib), ob = (u / nib) % nob, ib = u % nib;
        const int o0 = ob * 64, i0 = ib * kTileI;
        tile_any(std::min(4, (O - o0) / 16), std::min(kTileI, I - i0), dyp, xp, dw, m0, m1, H, W,
                 I, O, tap / 3, tap % 3, o0, i0);
      }
    }
  }
  return 0;
}

#else  // a copy built without AVX-512: the weight gradient stays aten's

bool conv3x3_wgrad_supported() { return false; }

int conv3x3_wgrad_bf16(const uint16_t*, const uint16_t*, float*, uint32_t*, uint32_t*, int, int,
                       int, int, int) {
  return 1;
}

#endif

}  // namespace cpu
DBF_NAMESPACE_END
