// The channels_last (NHWC) tiles of the GPU bn_act kernels, as host/device
// functions: bn_act.cu's vector kernels call them between barriers, and the
// CPU test harness (tests/ops/bn_act_tile_harness.cpp) calls the same
// functions for every thread of every block in turn, so the indexing, the
// 16-byte vectors and the fixed reduction order are tested without a GPU.
//
// A thread owns kVec consecutive channels (16 bytes: 8 bf16/fp16 or 4 fp32)
// of a row; lanes = C / kVec threads cover a row, so one 256-thread block
// sweeps 256 / lanes rows at a time, reading whole 16-byte words (the scalar
// kernels read 2 bytes a thread). Used when C is a multiple of kVec, lanes is
// a power of two no larger than the block, and the pointers are 16-byte
// aligned (tile_lanes, vec_aligned); otherwise bn_act.cu's scalar kernels run.
#pragma once
#include "bn_act_math.cuh"

#define DBF_TILE_THREADS 256

DBF_NAMESPACE_BEGIN

template <int DT>
struct Tile {
  typedef typename Elem<DT>::T T;
  enum { kVec = 16 / sizeof(T) };
};

// Vector lanes per row of the tiled kernels for C channels of DT, or 0 when
// the scalar kernels must run.
template <int DT>
DBF_HD int tile_lanes(int C) {
  const int v = Tile<DT>::kVec;
  if (C <= 0 || C % v != 0) return 0;
  const int lanes = C / v;
  return (lanes <= DBF_TILE_THREADS && (lanes & (lanes - 1)) == 0) ? lanes : 0;
}

DBF_HD bool vec_aligned(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15ULL) == 0;
}

// kVec elements at p (16-byte aligned) as floats; one 16-byte load on the GPU.
template <int DT>
DBF_HD void load_vec(const typename Elem<DT>::T* p, float* out) {
  typedef typename Elem<DT>::T T;
#if defined(__CUDA_ARCH__)
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#else
  const T* e = p;
#endif
DBF_UNROLL
  for (int j = 0; j < Tile<DT>::kVec; ++j) out[j] = Elem<DT>::load(e[j]);
}

template <int DT>
DBF_HD void store_vec(typename Elem<DT>::T* p, const float* v) {
#if defined(__CUDA_ARCH__)
  uint4 raw;
  typename Elem<DT>::T* e = reinterpret_cast<typename Elem<DT>::T*>(&raw);
DBF_UNROLL
  for (int j = 0; j < Tile<DT>::kVec; ++j) e[j] = Elem<DT>::store(v[j]);
  *reinterpret_cast<uint4*>(p) = raw;
#else
DBF_UNROLL
  for (int j = 0; j < Tile<DT>::kVec; ++j) p[j] = Elem<DT>::store(v[j]);
#endif
}

// Rows [m0, m1) of partition p out of P over M rows (as the scalar kernels split them).
DBF_HD void partition_rows(i64 M, int P, int p, i64* m0, i64* m1) {
  const i64 chunk = (M + P - 1) / P;
  *m0 = p * chunk;
  *m1 = *m0 + chunk < M ? *m0 + chunk : M;
}

// Phase 1 of a partial block, thread t: its kVec channels' sums over rows
// m0 + t / lanes, then every (256 / lanes)-th row below m1, into smem
// s1/s2 [256 * kVec] at t * kVec. MODE 0: sums of (x - k), (x - k)^2 with k
// the channel's first sample (written to shift_k by block 0); MODE 1: sums of
// g and g * xhat, stats = [mean | invstd | scale | bias] of the forward.
template <int DT, int MODE>
DBF_HD void tile_partial_thread(const typename Elem<DT>::T* x, const typename Elem<DT>::T* dy,
                                const float* stats, int act, int C, int lanes, i64 m0, i64 m1,
                                int t, int p, float* shift_k, float* s1, float* s2) {
  const int V = Tile<DT>::kVec;
  const int c0 = (t % lanes) * V;
  const int rows = DBF_TILE_THREADS / lanes;
  float a[Tile<DT>::kVec], b[Tile<DT>::kVec], k[Tile<DT>::kVec], xv[Tile<DT>::kVec],
      dv[Tile<DT>::kVec];
DBF_UNROLL
  for (int j = 0; j < V; ++j) a[j] = b[j] = k[j] = 0.0f;
  if (MODE == 0) {
    load_vec<DT>(x + c0, k);
    if (p == 0 && t < lanes) {
DBF_UNROLL
      for (int j = 0; j < V; ++j) shift_k[c0 + j] = k[j];
    }
  }
  for (i64 m = m0 + t / lanes; m < m1; m += rows) {
    load_vec<DT>(x + m * C + c0, xv);
    if (MODE == 0) {
DBF_UNROLL
      for (int j = 0; j < V; ++j) {
        const float d = xv[j] - k[j];
        a[j] += d;
        b[j] += d * d;
      }
    } else {
      load_vec<DT>(dy + m * C + c0, dv);
DBF_UNROLL
      for (int j = 0; j < V; ++j) {
        const int c = c0 + j;
        const float g = bn_act_g(xv[j], dv[j], stats[c], stats[2 * C + c], stats[3 * C + c], act);
        a[j] += g;
        b[j] += g * (xv[j] - stats[c]) * stats[C + c];
      }
    }
  }
DBF_UNROLL
  for (int j = 0; j < V; ++j) {
    s1[t * V + j] = a[j];
    s2[t * V + j] = b[j];
  }
}

// Phase 2, one step of the tree over a block's rows: thread t of row
// t / lanes < step adds row (t / lanes + step)'s sums. Steps run from half the
// rows down to 1, a barrier after each: a fixed order, so the same bits every run.
template <int DT>
DBF_HD void tile_reduce_step(float* s1, float* s2, int t, int lanes, int step) {
  const int V = Tile<DT>::kVec;
  if (t / lanes >= step) return;
  const int o = (t + step * lanes) * V;
DBF_UNROLL
  for (int j = 0; j < V; ++j) {
    s1[t * V + j] += s1[o + j];
    s2[t * V + j] += s2[o + j];
  }
}

// Phase 3: the threads of row 0 write partition p's sums, [P, C, 2] as the
// scalar kernels do (so one finalize serves both).
template <int DT>
DBF_HD void tile_write_partial(const float* s1, const float* s2, int t, int lanes, int C, int p,
                               float* partial) {
  const int V = Tile<DT>::kVec;
  if (t >= lanes) return;
  const int c0 = t * V;
DBF_UNROLL
  for (int j = 0; j < V; ++j) {
    float* out = partial + (static_cast<i64>(p) * C + c0 + j) * 2;
    out[0] = s1[t * V + j];
    out[1] = s2[t * V + j];
  }
}

// Element-wise passes on vector v (elements v * kVec ...): the forward's
// y = act(z), and the backward's dx = scale * g + (x - mean) * coef_x + coef_1.
template <int DT>
DBF_HD void tile_forward_vec(const typename Elem<DT>::T* x, typename Elem<DT>::T* y,
                             const float* stats, i64 v, int C, int act) {
  const int V = Tile<DT>::kVec;
  const i64 e = v * V;
  const int c0 = static_cast<int>(e % C);
  float xv[Tile<DT>::kVec];
  load_vec<DT>(x + e, xv);
DBF_UNROLL
  for (int j = 0; j < V; ++j) {
    const int c = c0 + j;
    xv[j] = act_forward(bn_z(xv[j], stats[c], stats[2 * C + c], stats[3 * C + c]), act);
  }
  store_vec<DT>(y + e, xv);
}

template <int DT>
DBF_HD void tile_dx_vec(const typename Elem<DT>::T* x, const typename Elem<DT>::T* dy,
                        typename Elem<DT>::T* dx, const float* stats, const float* coef, i64 v,
                        int C, int act) {
  const int V = Tile<DT>::kVec;
  const i64 e = v * V;
  const int c0 = static_cast<int>(e % C);
  float xv[Tile<DT>::kVec], dv[Tile<DT>::kVec];
  load_vec<DT>(x + e, xv);
  load_vec<DT>(dy + e, dv);
DBF_UNROLL
  for (int j = 0; j < V; ++j) {
    const int c = c0 + j;
    const float g = bn_act_g(xv[j], dv[j], stats[c], stats[2 * C + c], stats[3 * C + c], act);
    dv[j] = stats[2 * C + c] * g + (xv[j] - stats[c]) * coef[c] + coef[C + c];
  }
  store_vec<DT>(dx + e, dv);
}

DBF_NAMESPACE_END
