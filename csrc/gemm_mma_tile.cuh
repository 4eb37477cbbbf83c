// Tile geometry of the tensor-core GEMM (gemm_mma.cu), shared with its CPU
// emulation (gemm_mma_cpu.cpp) so both walk the same tiles, fragments and bounds.
//
// C[M,N] (fp32, row-major) = A[M,K] @ B[K,N] (fp16 or bf16, row-major).
// One thread block: 4 warps (2 x 2) computing a 64 x 64 tile of C; the K loop
// stages 64 x 32 of A and 32 x 64 of B in shared memory (zero-filled past the
// edges, so any M, N, K works). Each warp computes 32 x 32 as 2 x 4 tiles of
// the mma.sync.m16n8k16 instruction (fp32 accumulate).
#pragma once
#include "dbf_common.cuh"
#include "float16_bits.cuh"

DBF_NAMESPACE_BEGIN
namespace gemm {

enum {
  kThreads = 128,
  kBM = 64,
  kBN = 64,
  kBK = 32,
  kWarpM = 32,
  kWarpN = 32,
  kMI = kWarpM / 16,  // m16 tiles per warp
  kNI = kWarpN / 8,   // n8 tiles per warp
  kKS = kBK / 16,     // k16 steps per stage
  kAStride = kBK + 8,  // padded shared-memory rows (fewer bank conflicts)
  kBStride = kBN + 8,
};

// Fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix Fragments for
// mma.m16n8k16"): lane = 4 * group + tig. Stated once here and used by both
// the device loaders and the CPU emulation.
// A (16 x 16, row-major): register r in 0..3, half h in 0..1.
DBF_HD void frag_a_coord(int lane, int r, int h, int* row, int* col) {
  *row = (lane >> 2) + ((r & 1) ? 8 : 0);
  *col = (lane & 3) * 2 + h + ((r & 2) ? 8 : 0);
}
// B (16 x 8, "col"): register r in 0..1, half h.
DBF_HD void frag_b_coord(int lane, int r, int h, int* k, int* n) {
  *k = (lane & 3) * 2 + h + (r ? 8 : 0);
  *n = lane >> 2;
}
// C/D (16 x 8, fp32): register r in 0..3.
DBF_HD void frag_c_coord(int lane, int r, int* row, int* col) {
  *row = (lane >> 2) + ((r & 2) ? 8 : 0);
  *col = (lane & 3) * 2 + (r & 1);
}

// 16 bytes = 8 sixteen-bit values: the unit of the vectorised staging path.
struct alignas(16) Chunk16 {
  u32 v[4];
};

// Whether a whole stage can be staged with 16-byte copies: full tiles only,
// row strides a multiple of 8 elements, 16-byte-aligned base pointers.
DBF_HD bool stage_vectorisable(const u16* A, const u16* B, int M, int N, int K, int lda,
                               int ldb, int bm0, int bn0, int k0) {
  const unsigned long long pa = reinterpret_cast<unsigned long long>(A);
  const unsigned long long pb = reinterpret_cast<unsigned long long>(B);
  return ((pa | pb) & 15ull) == 0 && lda % 8 == 0 && ldb % 8 == 0 && bm0 + kBM <= M &&
         bn0 + kBN <= N && k0 + kBK <= K;
}

// Thread `tid` of the block stages its share of the A and B tiles for the K
// offset k0 (zero past the matrix edges). `vec`: stage_vectorisable() holds,
// so each thread copies 16-byte chunks (2 of A, 2 of B) instead of 32 scalars.
DBF_HD void load_stage(const u16* A, const u16* B, u16* As, u16* Bs, int M, int N, int K, int lda,
                       int ldb, int bm0, int bn0, int k0, int tid, bool vec) {
  if (vec) {
    // Padded rows stay 16-byte aligned: kAStride * 2 = 80, kBStride * 2 = 144.
    for (int e = tid; e < kBM * kBK / 8; e += kThreads) {
      const int r = e / (kBK / 8), c = (e % (kBK / 8)) * 8;
      *reinterpret_cast<Chunk16*>(As + r * kAStride + c) =
          *reinterpret_cast<const Chunk16*>(A + static_cast<i64>(bm0 + r) * lda + k0 + c);
    }
    for (int e = tid; e < kBK * kBN / 8; e += kThreads) {
      const int r = e / (kBN / 8), c = (e % (kBN / 8)) * 8;
      *reinterpret_cast<Chunk16*>(Bs + r * kBStride + c) =
          *reinterpret_cast<const Chunk16*>(B + static_cast<i64>(k0 + r) * ldb + bn0 + c);
    }
    return;
  }
  for (int e = tid; e < kBM * kBK; e += kThreads) {
    const int r = e / kBK, c = e % kBK;
    const int gr = bm0 + r, gc = k0 + c;
    As[r * kAStride + c] = (gr < M && gc < K) ? A[static_cast<i64>(gr) * lda + gc] : u16(0);
  }
  for (int e = tid; e < kBK * kBN; e += kThreads) {
    const int r = e / kBN, c = e % kBN;
    const int gr = k0 + r, gc = bn0 + c;
    Bs[r * kBStride + c] = (gr < K && gc < N) ? B[static_cast<i64>(gr) * ldb + gc] : u16(0);
  }
}

DBF_HD u32 pack2(u16 lo, u16 hi) { return static_cast<u32>(lo) | (static_cast<u32>(hi) << 16); }

// Two adjacent 16-bit values (p 4-byte aligned) as one 32-bit register, low
// half first: one shared-memory load instead of two.
DBF_HD u32 load_pair(const u16* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const u32*>(p);
#else
  u32 v;
  __builtin_memcpy(&v, p, 4);  // little-endian: p[0] in the low half, as pack2
  return v;
#endif
}

// Fragments of warp (wm, wn) for m-tile mi / n-tile ni and k-step ks.
DBF_HD void load_frag_a(const u16* As, int wm, int mi, int ks, int lane, u32 a[4]) {
  for (int r = 0; r < 4; ++r) {
    int row, col;
    frag_a_coord(lane, r, 0, &row, &col);
    const u16* p = As + (wm * kWarpM + mi * 16 + row) * kAStride + ks * 16 + col;
    a[r] = load_pair(p);  // halves 0 and 1 are adjacent columns (even offset)
  }
}
DBF_HD void load_frag_b(const u16* Bs, int wn, int ni, int ks, int lane, u32 b[2]) {
  for (int r = 0; r < 2; ++r) {
    int k, n;
    frag_b_coord(lane, r, 0, &k, &n);
    const u16* p = Bs + (ks * 16 + k) * kBStride + wn * kWarpN + ni * 8 + n;
    b[r] = pack2(p[0], p[kBStride]);  // halves 0 and 1 are adjacent k rows
  }
}

// Write one warp's accumulators (acc[mi][ni][r]) of lane `lane` to C.
DBF_HD void store_c(float* C, int M, int N, int ldc, int bm0, int bn0, int wm, int wn, int lane,
                    const float acc[kMI][kNI][4]) {
  for (int mi = 0; mi < kMI; ++mi)
    for (int ni = 0; ni < kNI; ++ni)
      for (int r = 0; r < 4; ++r) {
        int row, col;
        frag_c_coord(lane, r, &row, &col);
        const int gr = bm0 + wm * kWarpM + mi * 16 + row;
        const int gc = bn0 + wn * kWarpN + ni * 8 + col;
        if (gr < M && gc < N) C[static_cast<i64>(gr) * ldc + gc] = acc[mi][ni][r];
      }
}

}  // namespace gemm
DBF_NAMESPACE_END
