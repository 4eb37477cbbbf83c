// Tensor-core GEMM tile kernel: C (fp32) = A @ B with A, B fp16 or bf16,
// row-major, any M, N, K (edges zero-filled). Uses mma.sync.m16n8k16 through
// inline PTX, so it needs no CUDA header and compiles under NVRTC as it does
// under nvcc (sm_80 and newer). Tile geometry: gemm_mma_tile.cuh.
#include "gemm_mma_tile.cuh"

namespace dbf {
namespace gemm {

template <int DT>
__device__ __forceinline__ void mma16816(float d[4], const u32 a[4], const u32 b[2]) {
  if (DT == kBF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

template <int DT>
__device__ __forceinline__ void gemm_block(const u16* __restrict__ A, const u16* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K, int lda,
                                           int ldb, int ldc) {
  __shared__ __align__(16) u16 As[kBM * kAStride];
  __shared__ __align__(16) u16 Bs[kBK * kBStride];
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int wm = warp >> 1, wn = warp & 1;
  const int bm0 = blockIdx.y * kBM, bn0 = blockIdx.x * kBN;
  float acc[kMI][kNI][4];
  for (int mi = 0; mi < kMI; ++mi)
    for (int ni = 0; ni < kNI; ++ni)
      for (int r = 0; r < 4; ++r) acc[mi][ni][r] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += kBK) {
    const bool vec = stage_vectorisable(A, B, M, N, K, lda, ldb, bm0, bn0, k0);
    load_stage(A, B, As, Bs, M, N, K, lda, ldb, bm0, bn0, k0, tid, vec);
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) {
      u32 a[kMI][4], b[kNI][2];
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) load_frag_a(As, wm, mi, ks, lane, a[mi]);
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni) load_frag_b(Bs, wn, ni, ks, lane, b[ni]);
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNI; ++ni) mma16816<DT>(acc[mi][ni], a[mi], b[ni]);
    }
    __syncthreads();
  }
  store_c(C, M, N, ldc, bm0, bn0, wm, wn, lane, acc);
}

}  // namespace gemm
}  // namespace dbf

// grid = (ceil(N / 64), ceil(M / 64)), block = 128 threads.
extern "C" __global__ void __launch_bounds__(128)
    gemm_mma_f16(const unsigned short* A, const unsigned short* B, float* C, int M, int N, int K,
                 int lda, int ldb, int ldc) {
  dbf::gemm::gemm_block<dbf::kF16>(A, B, C, M, N, K, lda, ldb, ldc);
}

extern "C" __global__ void __launch_bounds__(128)
    gemm_mma_bf16(const unsigned short* A, const unsigned short* B, float* C, int M, int N, int K,
                  int lda, int ldb, int ldc) {
  dbf::gemm::gemm_block<dbf::kBF16>(A, B, C, M, N, K, lda, ldb, ldc);
}

#if !defined(__CUDACC_RTC__)
#include "cuda_launchers.h"

extern "C" int dbf_gemm_mma_cuda(int dtype, const void* A, const void* B, float* C, int M, int N,
                                 int K, int lda, int ldb, int ldc, void* stream) {
  const dim3 grid((N + dbf::gemm::kBN - 1) / dbf::gemm::kBN,
                  (M + dbf::gemm::kBM - 1) / dbf::gemm::kBM);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const unsigned short* a = static_cast<const unsigned short*>(A);
  const unsigned short* b = static_cast<const unsigned short*>(B);
  if (dtype == dbf::kBF16)
    gemm_mma_bf16<<<grid, dbf::gemm::kThreads, 0, s>>>(a, b, C, M, N, K, lda, ldb, ldc);
  else
    gemm_mma_f16<<<grid, dbf::gemm::kThreads, 0, s>>>(a, b, C, M, N, K, lda, ldb, ldc);
  return static_cast<int>(cudaGetLastError());
}
#endif  // !__CUDACC_RTC__
