// The tensor-core GEMM's block, warp and fragment walk (gemm_mma_tile.cuh) run on
// the CPU, with mma.m16n8k16 emulated from the stated fragment layouts. It
// checks the kernel's tiling, staging and edge handling against torch without
// a GPU; it does not prove the layouts match the hardware (only a GPU run can)
// and it is not a fast path.
#include <omp.h>

#include "cpu_kernels.h"
#include "gemm_mma_tile.cuh"

DBF_NAMESPACE_BEGIN
namespace cpu {
namespace {

using namespace dbf::gemm;

template <int DT>
float unpack(u32 v, int h) {
  return Elem<DT>::load(static_cast<u16>(h ? v >> 16 : v & 0xffffu));
}

// One warp's mma: every lane's A/B fragments are scattered back to the 16x16
// and 16x8 matrices through the layout functions, multiplied in fp32, and the
// product gathered into each lane's accumulators.
template <int DT>
void mma_warp(const u32 a[32][4], const u32 b[32][2], float d[32][4]) {
  float Am[16][16], Bm[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h) {
        int row, col;
        frag_a_coord(lane, r, h, &row, &col);
        Am[row][col] = unpack<DT>(a[lane][r], h);
      }
    for (int r = 0; r < 2; ++r)
      for (int h = 0; h < 2; ++h) {
        int k, n;
        frag_b_coord(lane, r, h, &k, &n);
        Bm[k][n] = unpack<DT>(b[lane][r], h);
      }
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r) {
      int row, col;
      frag_c_coord(lane, r, &row, &col);
      float s = 0.0f;
      for (int k = 0; k < 16; ++k) s += Am[row][k] * Bm[k][col];
      d[lane][r] += s;
    }
}

// Returns how many (block, k-stage) pairs took the vectorised staging path.
template <int DT>
int gemm_t(const u16* A, const u16* B, float* C, int M, int N, int K, int lda, int ldb,
           int ldc) {
  const int gm = (M + kBM - 1) / kBM, gn = (N + kBN - 1) / kBN;
  int vec_stages = 0;
#pragma omp parallel for schedule(dynamic) reduction(+ : vec_stages)
  for (int blk = 0; blk < gm * gn; ++blk) {
    const int bm0 = (blk / gn) * kBM, bn0 = (blk % gn) * kBN;
    alignas(16) u16 As[kBM * kAStride];
    alignas(16) u16 Bs[kBK * kBStride];
    static thread_local float acc[4][32][kMI][kNI][4];  // [warp][lane]...
    for (int w = 0; w < 4; ++w)
      for (int l = 0; l < 32; ++l)
        for (int mi = 0; mi < kMI; ++mi)
          for (int ni = 0; ni < kNI; ++ni)
            for (int r = 0; r < 4; ++r) acc[w][l][mi][ni][r] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += kBK) {
      const bool vec = stage_vectorisable(A, B, M, N, K, lda, ldb, bm0, bn0, k0);
      if (vec) ++vec_stages;
      for (int tid = 0; tid < kThreads; ++tid)  // all threads, then the "barrier"
        load_stage(A, B, As, Bs, M, N, K, lda, ldb, bm0, bn0, k0, tid, vec);
      for (int w = 0; w < 4; ++w) {
        const int wm = w >> 1, wn = w & 1;
        for (int ks = 0; ks < kKS; ++ks) {
          u32 a[kMI][32][4], b[kNI][32][2];
          for (int lane = 0; lane < 32; ++lane) {
            for (int mi = 0; mi < kMI; ++mi) load_frag_a(As, wm, mi, ks, lane, a[mi][lane]);
            for (int ni = 0; ni < kNI; ++ni) load_frag_b(Bs, wn, ni, ks, lane, b[ni][lane]);
          }
          for (int mi = 0; mi < kMI; ++mi)
            for (int ni = 0; ni < kNI; ++ni) {
              float d[32][4];
              for (int l = 0; l < 32; ++l)
                for (int r = 0; r < 4; ++r) d[l][r] = acc[w][l][mi][ni][r];
              mma_warp<DT>(a[mi], b[ni], d);
              for (int l = 0; l < 32; ++l)
                for (int r = 0; r < 4; ++r) acc[w][l][mi][ni][r] = d[l][r];
            }
        }
      }
    }
    for (int w = 0; w < 4; ++w)
      for (int lane = 0; lane < 32; ++lane)
        store_c(C, M, N, ldc, bm0, bn0, w >> 1, w & 1, lane, acc[w][lane]);
  }
  return vec_stages;
}

}  // namespace

int gemm_mma_emulated(int dtype, const void* A, const void* B, float* C, int M, int N, int K,
                      int lda, int ldb, int ldc) {
  const u16* a = static_cast<const u16*>(A);
  const u16* b = static_cast<const u16*>(B);
  if (dtype == kBF16) return gemm_t<kBF16>(a, b, C, M, N, K, lda, ldb, ldc);
  return gemm_t<kF16>(a, b, C, M, N, K, lda, ldb, ldc);
}

}  // namespace cpu
DBF_NAMESPACE_END
