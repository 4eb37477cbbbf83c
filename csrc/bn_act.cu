// BatchNorm (training or eval) + activation, forward and backward, on NCHW or
// NHWC (channels_last) tensors of fp32 / bf16 / fp16; statistics in fp32 with
// the per-channel finalize in fp64. The math is in bn_act_math.cuh, shared with
// the CPU build. Kernels are extern "C" so that CuPy's RawModule finds them by
// name; the host launchers at the bottom exist only in the nvcc build.
//
// Pass 1 (bn_stats_partial): per (partition, channel) sums of (x - k), (x - k)^2.
// Pass 2 (bn_stats_finalize): mean, invstd, scale, bias; running stats.
// Pass 3 (bn_act_fwd): y = act((x - mean) * scale + bias).
// Backward: bn_bwd_partial (sums of g and g * xhat), bn_bwd_finalize, bn_bwd_dx.
// Partials are reduced in a fixed order, so results are deterministic.
// channels_last with C a multiple of 16 bytes' worth of elements (every
// shape of the CIFAR net) runs the *_vec kernels: 16-byte loads and stores,
// one block per partition covering every channel, the shift k read in pass 1
// (no launch of its own); their per-thread steps are bn_act_tile.cuh's,
// tested on the CPU. Other shapes run the scalar kernels.
#include "bn_act_math.cuh"
#include "bn_act_tile.cuh"

namespace dbf {

// One thread block of the partial kernels: 256 threads. In NCHW a block walks
// one channel's rows (consecutive spatial positions, coalesced); in NHWC it is
// 32 channels x 8 rows (consecutive channels, coalesced).
#define DBF_BN_THREADS 256

// Per-channel shift for the partial sums: the channel's first sample.
template <int DT>
__device__ __forceinline__ float bn_shift(const typename Elem<DT>::T* x, int c, int HW, int cl) {
  return Elem<DT>::load(x[cl ? c : static_cast<i64>(c) * HW]);
}

// Accumulates one thread's rows m0, m0 + step, ... < m1 of channel c.
template <int DT, int MODE, typename I>
__device__ __forceinline__ void partial_rows(const typename Elem<DT>::T* __restrict__ x,
                                             const typename Elem<DT>::T* __restrict__ dy,
                                             int act, int C, int HW, int cl, int c, i64 m0,
                                             i64 m1, int step, float k, float mean, float invstd,
                                             float scale, float beta, float* a, float* b) {
  typedef Elem<DT> E;
  const I hw = static_cast<I>(HW), cc = static_cast<I>(C), ci = static_cast<I>(c);
  for (I m = static_cast<I>(m0); m < static_cast<I>(m1); m += static_cast<I>(step)) {
    I idx;
    if (cl) {
      idx = m * cc + ci;
    } else {
      const I n = m / hw;
      idx = (n * cc + ci) * hw + (m - n * hw);
    }
    const float xv = E::load(x[idx]);
    if (MODE == 0) {
      const float d = xv - k;
      *a += d;
      *b += d * d;
    } else {
      const float g = bn_act_g(xv, E::load(dy[idx]), mean, scale, beta, act);
      *a += g;
      *b += g * (xv - mean) * invstd;
    }
  }
}

// Partial sums. mode 0: statistics of x (sum (x-k), sum (x-k)^2).
// mode 1: backward sums (sum g, sum g * xhat) with g = dy * act'(z).
template <int DT, int MODE>
__device__ __forceinline__ void bn_partial(const typename Elem<DT>::T* __restrict__ x,
                                           const typename Elem<DT>::T* __restrict__ dy,
                                           const float* __restrict__ stats, int act, int N, int C,
                                           int HW, int cl, int P, float* __restrict__ partial) {
  __shared__ float s1[DBF_BN_THREADS];
  __shared__ float s2[DBF_BN_THREADS];
  const i64 M = static_cast<i64>(N) * HW;
  const int p = blockIdx.y;
  const i64 chunk = (M + P - 1) / P;
  const i64 m0 = p * chunk;
  const i64 m1 = m0 + chunk < M ? m0 + chunk : M;
  float a = 0.0f, b = 0.0f;
  // nchan: how many channels one block covers (threads t < nchan end up
  // holding one channel's sums each after the tree reduction).
  int c, nchan, rows_step, row0;
  if (cl) {  // NHWC: threadIdx.x = channel within 32, threadIdx.y = row lane
    c = blockIdx.x * 32 + threadIdx.x;
    nchan = 32;
    row0 = threadIdx.y;
    rows_step = DBF_BN_THREADS / 32;
  } else {  // NCHW: one channel per block
    c = blockIdx.x;
    nchan = 1;
    row0 = threadIdx.x;
    rows_step = DBF_BN_THREADS;
  }
  if (c < C) {
    float k = 0.0f, mean = 0.0f, invstd = 0.0f, scale = 0.0f, beta = 0.0f;
    if (MODE == 0) {
      k = bn_shift<DT>(x, c, HW, cl);
    } else {
      mean = stats[c];
      invstd = stats[C + c];
      scale = stats[2 * C + c];
      beta = stats[3 * C + c];
    }
    // 32-bit index arithmetic whenever the tensor allows it (64-bit division
    // costs several times more on the GPU).
    if (static_cast<i64>(N) * C * HW < 2147483647LL) {
      partial_rows<DT, MODE, unsigned int>(x, dy, act, C, HW, cl, c, m0 + row0, m1, rows_step,
                                           k, mean, invstd, scale, beta, &a, &b);
    } else {
      partial_rows<DT, MODE, i64>(x, dy, act, C, HW, cl, c, m0 + row0, m1, rows_step, k, mean,
                                  invstd, scale, beta, &a, &b);
    }
  }
  // Tree reduction over the threads that share a channel.
  const int t = threadIdx.x + threadIdx.y * blockDim.x;
  s1[t] = a;
  s2[t] = b;
  __syncthreads();
  for (int step = DBF_BN_THREADS / 2; step >= nchan; step >>= 1) {
    if (t < step) {
      s1[t] += s1[t + step];
      s2[t] += s2[t + step];
    }
    __syncthreads();
  }
  if (t < nchan && c < C) {
    float* out = partial + (static_cast<i64>(p) * C + c) * 2;
    out[0] = s1[t];
    out[1] = s2[t];
  }
}

template <int DT, typename I>
__device__ __forceinline__ void bn_fwd_loop(const typename Elem<DT>::T* __restrict__ x,
                                            typename Elem<DT>::T* __restrict__ y,
                                            const float* __restrict__ stats, I total, int C,
                                            int chan_div, int act) {
  typedef Elem<DT> E;
  const float* mean = stats;
  const float* scale = stats + 2 * C;
  const float* beta = stats + 3 * C;
  const I cc = static_cast<I>(C), div = static_cast<I>(chan_div);
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>((i / div) % cc);
    y[i] = E::store(act_forward(bn_z(E::load(x[i]), mean[c], scale[c], beta[c]), act));
  }
}

template <int DT, typename I>
__device__ __forceinline__ void bn_dx_loop(const typename Elem<DT>::T* __restrict__ x,
                                           const typename Elem<DT>::T* __restrict__ dy,
                                           typename Elem<DT>::T* __restrict__ dx,
                                           const float* __restrict__ stats,
                                           const float* __restrict__ coef, I total, int C,
                                           int chan_div, int act) {
  typedef Elem<DT> E;
  const float* mean = stats;
  const float* scale = stats + 2 * C;
  const float* beta = stats + 3 * C;
  const I cc = static_cast<I>(C), div = static_cast<I>(chan_div);
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>((i / div) % cc);
    const float xv = E::load(x[i]);
    const float g = bn_act_g(xv, E::load(dy[i]), mean[c], scale[c], beta[c], act);
    dx[i] = E::store(scale[c] * g + (xv - mean[c]) * coef[c] + coef[C + c]);
  }
}

// Grid-stride loops stay below 2^31 + 2^21 (8192 blocks x 256 threads), so an
// unsigned 32-bit index is safe for totals below 2^31.
template <int DT>
__device__ __forceinline__ void bn_fwd(const typename Elem<DT>::T* __restrict__ x,
                                       typename Elem<DT>::T* __restrict__ y,
                                       const float* __restrict__ stats, i64 total, int C,
                                       int chan_div, int act) {
  if (total < 2147483647LL)
    bn_fwd_loop<DT, unsigned int>(x, y, stats, static_cast<unsigned int>(total), C, chan_div, act);
  else
    bn_fwd_loop<DT, i64>(x, y, stats, total, C, chan_div, act);
}

template <int DT>
__device__ __forceinline__ void bn_dx(const typename Elem<DT>::T* __restrict__ x,
                                      const typename Elem<DT>::T* __restrict__ dy,
                                      typename Elem<DT>::T* __restrict__ dx,
                                      const float* __restrict__ stats,
                                      const float* __restrict__ coef, i64 total, int C,
                                      int chan_div, int act) {
  if (total < 2147483647LL)
    bn_dx_loop<DT, unsigned int>(x, dy, dx, stats, coef, static_cast<unsigned int>(total), C,
                                 chan_div, act);
  else
    bn_dx_loop<DT, i64>(x, dy, dx, stats, coef, total, C, chan_div, act);
}

// ---- the channels_last tiles (bn_act_tile.cuh): one block per partition ----
template <int DT, int MODE>
__device__ __forceinline__ void tile_partial_block(const typename Elem<DT>::T* __restrict__ x,
                                                   const typename Elem<DT>::T* __restrict__ dy,
                                                   const float* __restrict__ stats, int act,
                                                   i64 M, int C, int P, float* __restrict__ partial,
                                                   float* __restrict__ shift_k) {
  __shared__ float s1[DBF_TILE_THREADS * Tile<DT>::kVec];
  __shared__ float s2[DBF_TILE_THREADS * Tile<DT>::kVec];
  const int t = threadIdx.x, p = blockIdx.x;
  const int lanes = tile_lanes<DT>(C);
  i64 m0, m1;
  partition_rows(M, P, p, &m0, &m1);
  tile_partial_thread<DT, MODE>(x, dy, stats, act, C, lanes, m0, m1, t, p, shift_k, s1, s2);
  __syncthreads();
  for (int step = DBF_TILE_THREADS / lanes / 2; step >= 1; step >>= 1) {
    tile_reduce_step<DT>(s1, s2, t, lanes, step);
    __syncthreads();
  }
  tile_write_partial<DT>(s1, s2, t, lanes, C, p, partial);
}

template <int DT>
__device__ __forceinline__ void tile_forward(const typename Elem<DT>::T* __restrict__ x,
                                             typename Elem<DT>::T* __restrict__ y,
                                             const float* __restrict__ stats, i64 nvec, int C,
                                             int act) {
  for (i64 v = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; v < nvec;
       v += static_cast<i64>(gridDim.x) * blockDim.x)
    tile_forward_vec<DT>(x, y, stats, v, C, act);
}

template <int DT>
__device__ __forceinline__ void tile_dx(const typename Elem<DT>::T* __restrict__ x,
                                        const typename Elem<DT>::T* __restrict__ dy,
                                        typename Elem<DT>::T* __restrict__ dx,
                                        const float* __restrict__ stats,
                                        const float* __restrict__ coef, i64 nvec, int C, int act) {
  for (i64 v = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; v < nvec;
       v += static_cast<i64>(gridDim.x) * blockDim.x)
    tile_dx_vec<DT>(x, dy, dx, stats, coef, v, C, act);
}

}  // namespace dbf

// ---- extern "C" entry points, one per dtype -------------------------------
#define DBF_BN_KERNELS(SUFFIX, DT)                                                              \
  extern "C" __global__ void __launch_bounds__(DBF_BN_THREADS)                                  \
      bn_stats_partial_##SUFFIX(const dbf::Elem<DT>::T* x, int N, int C, int HW, int cl, int P, \
                                float* partial) {                                               \
    dbf::bn_partial<DT, 0>(x, 0, 0, 0, N, C, HW, cl, P, partial);                               \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(DBF_BN_THREADS)                                  \
      bn_bwd_partial_##SUFFIX(const dbf::Elem<DT>::T* x, const dbf::Elem<DT>::T* dy,            \
                              const float* stats, int act, int N, int C, int HW, int cl, int P, \
                              float* partial) {                                                 \
    dbf::bn_partial<DT, 1>(x, dy, stats, act, N, C, HW, cl, P, partial);                        \
  }                                                                                             \
  extern "C" __global__ void bn_act_fwd_##SUFFIX(const dbf::Elem<DT>::T* x,                     \
                                                 dbf::Elem<DT>::T* y, const float* stats,       \
                                                 long long total, int C, int chan_div,          \
                                                 int act) {                                     \
    dbf::bn_fwd<DT>(x, y, stats, total, C, chan_div, act);                                      \
  }                                                                                             \
  extern "C" __global__ void bn_bwd_dx_##SUFFIX(                                                \
      const dbf::Elem<DT>::T* x, const dbf::Elem<DT>::T* dy, dbf::Elem<DT>::T* dx,              \
      const float* stats, const float* coef, long long total, int C, int chan_div, int act) {   \
    dbf::bn_dx<DT>(x, dy, dx, stats, coef, total, C, chan_div, act);                            \
  }                                                                                             \
  extern "C" __global__ void bn_shift_first_##SUFFIX(const dbf::Elem<DT>::T* x, int C, int HW,  \
                                                     int cl, float* shift_out) {                \
    const int c = blockIdx.x * blockDim.x + threadIdx.x;                                        \
    if (c < C) shift_out[c] = dbf::bn_shift<DT>(x, c, HW, cl);                                  \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(DBF_TILE_THREADS) bn_stats_partial_vec_##SUFFIX( \
      const dbf::Elem<DT>::T* x, long long M, int C, int P, float* partial, float* shift_k) {   \
    dbf::tile_partial_block<DT, 0>(x, 0, 0, 0, M, C, P, partial, shift_k);                      \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(DBF_TILE_THREADS) bn_bwd_partial_vec_##SUFFIX(   \
      const dbf::Elem<DT>::T* x, const dbf::Elem<DT>::T* dy, const float* stats, int act,       \
      long long M, int C, int P, float* partial) {                                              \
    dbf::tile_partial_block<DT, 1>(x, dy, stats, act, M, C, P, partial, 0);                     \
  }                                                                                             \
  extern "C" __global__ void bn_act_fwd_vec_##SUFFIX(const dbf::Elem<DT>::T* x,                 \
                                                     dbf::Elem<DT>::T* y, const float* stats,   \
                                                     long long nvec, int C, int act) {          \
    dbf::tile_forward<DT>(x, y, stats, nvec, C, act);                                           \
  }                                                                                             \
  extern "C" __global__ void bn_bwd_dx_vec_##SUFFIX(                                            \
      const dbf::Elem<DT>::T* x, const dbf::Elem<DT>::T* dy, dbf::Elem<DT>::T* dx,              \
      const float* stats, const float* coef, long long nvec, int C, int act) {                  \
    dbf::tile_dx<DT>(x, dy, dx, stats, coef, nvec, C, act);                                     \
  }

DBF_BN_KERNELS(f32, dbf::kF32)
DBF_BN_KERNELS(bf16, dbf::kBF16)
DBF_BN_KERNELS(f16, dbf::kF16)

// The finalize kernels give each channel one warp (DBF_FINALIZE_CHANNELS
// channels a block of 256 threads): lane l sums partitions l, l + 32, ... in
// order, then a fixed shuffle tree joins the lanes, so the result is still
// deterministic. One thread a channel walking up to 528 partitions in series
// took 30 us a launch on an H100, as long as the stats pass itself.
#define DBF_FINALIZE_CHANNELS 8

__device__ __forceinline__ void warp_sum_pairs(const float* partial, int P, int C, int c, double& a,
                                               double& b) {
  double s = 0.0, ss = 0.0;
  for (int p = threadIdx.x & 31; p < P; p += 32) {
    s += partial[(static_cast<long long>(p) * C + c) * 2];
    ss += partial[(static_cast<long long>(p) * C + c) * 2 + 1];
  }
  for (int off = 16; off > 0; off >>= 1) {
    s += __shfl_down_sync(0xffffffffu, s, off);
    ss += __shfl_down_sync(0xffffffffu, ss, off);
  }
  a = s;
  b = ss;
}

// Per-channel finalize of the statistics: stats = [mean | invstd | scale | bias].
// In eval mode (training == 0) the running statistics are used and the partials
// are not read.
extern "C" __global__ void bn_stats_finalize(const float* partial, const float* shift_k, int P,
                                             int C, long long count, const float* weight,
                                             const float* bias, float eps, float momentum,
                                             int training, float* running_mean,
                                             float* running_var, float* stats) {
  const int c = blockIdx.x * DBF_FINALIZE_CHANNELS + threadIdx.x / 32;
  if (c >= C) return;  // the whole warp: c is the warp's
  double s = 0.0, ss = 0.0;
  if (training) warp_sum_pairs(partial, P, C, c, s, ss);
  if (threadIdx.x & 31) return;
  const dbf::ChannelStats st = dbf::bn_channel_stats(
      s, ss, training ? shift_k[c] : 0.0, count, weight[c], bias[c], eps, momentum,
      training != 0, running_mean ? running_mean + c : 0, running_var ? running_var + c : 0);
  stats[c] = st.mean;
  stats[C + c] = st.invstd;
  stats[2 * C + c] = st.scale;
  stats[3 * C + c] = st.bias;
}

// Per-channel finalize of the backward sums: coef = [coef_x | coef_1];
// dweight = sum g * xhat, dbias = sum g.
extern "C" __global__ void bn_bwd_finalize(const float* partial, int P, int C, long long count,
                                           const float* stats, int training, float* coef,
                                           float* dweight, float* dbias) {
  const int c = blockIdx.x * DBF_FINALIZE_CHANNELS + threadIdx.x / 32;
  if (c >= C) return;
  double sg = 0.0, sgx = 0.0;
  warp_sum_pairs(partial, P, C, c, sg, sgx);
  if (threadIdx.x & 31) return;
  const dbf::ChannelGrad g =
      dbf::bn_channel_grad(sg, sgx, count, stats[C + c], stats[2 * C + c], training != 0);
  coef[c] = g.coef_x;
  coef[C + c] = g.coef_1;
  dweight[c] = static_cast<float>(sgx);
  dbias[c] = static_cast<float>(sg);
}

// ---- host launchers (nvcc build only; CuPy launches the kernels itself) ----
#if !defined(__CUDACC_RTC__)
#include "cuda_launchers.h"

namespace {

dim3 partial_grid(int C, int P, int cl) {
  return cl ? dim3((C + 31) / 32, P) : dim3(C, P);
}
dim3 partial_block(int cl) { return cl ? dim3(32, DBF_BN_THREADS / 32) : dim3(DBF_BN_THREADS); }

// The launch sequence of one dtype, given its kernels. vec_lanes > 0 (C fits
// the tiles, channels_last, 16-byte aligned pointers): the *_vec kernels.
template <typename T>
int forward_launch(void (*shift_first)(const T*, int, int, int, float*),
                   void (*stats_partial)(const T*, int, int, int, int, int, float*),
                   void (*stats_partial_vec)(const T*, long long, int, int, float*, float*),
                   void (*act_fwd)(const T*, T*, const float*, long long, int, int, int),
                   void (*act_fwd_vec)(const T*, T*, const float*, long long, int, int),
                   int vec_lanes, const T* x, T* y, float* stats, const float* weight,
                   const float* bias, float* running_mean, float* running_var, float* partial,
                   float* shift_k, int P, int N, int C, int HW, int cl, int training, float eps,
                   float momentum, int act, cudaStream_t s) {
  const long long total = static_cast<long long>(N) * C * HW, M = static_cast<long long>(N) * HW;
  const long long vec = 16 / sizeof(T);  // elements in a tile's 16-byte word
  if (training) {
    if (vec_lanes) {
      stats_partial_vec<<<P, DBF_TILE_THREADS, 0, s>>>(x, M, C, P, partial, shift_k);
    } else {
      shift_first<<<(C + 127) / 128, 128, 0, s>>>(x, C, HW, cl, shift_k);
      stats_partial<<<partial_grid(C, P, cl), partial_block(cl), 0, s>>>(x, N, C, HW, cl, P, partial);
    }
  }
  bn_stats_finalize<<<(C + DBF_FINALIZE_CHANNELS - 1) / DBF_FINALIZE_CHANNELS, 256, 0, s>>>(
      partial, shift_k, P, C, M, weight, bias, eps, momentum, training, running_mean, running_var,
      stats);
  if (vec_lanes)
    act_fwd_vec<<<dbf_elementwise_blocks(total / vec), 256, 0, s>>>(x, y, stats, total / vec, C, act);
  else
    act_fwd<<<dbf_elementwise_blocks(total), 256, 0, s>>>(x, y, stats, total, C, cl ? 1 : HW, act);
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int backward_launch(void (*bwd_partial)(const T*, const T*, const float*, int, int, int, int, int,
                                        int, float*),
                    void (*bwd_partial_vec)(const T*, const T*, const float*, int, long long, int,
                                            int, float*),
                    void (*bwd_dx)(const T*, const T*, T*, const float*, const float*, long long,
                                   int, int, int),
                    void (*bwd_dx_vec)(const T*, const T*, T*, const float*, const float*,
                                       long long, int, int),
                    int vec_lanes, const T* x, const T* dy, T* dx, const float* stats,
                    float* dweight, float* dbias, float* partial, float* coef, int P, int N, int C,
                    int HW, int cl, int training, int act, cudaStream_t s) {
  const long long total = static_cast<long long>(N) * C * HW, M = static_cast<long long>(N) * HW;
  const long long vec = 16 / sizeof(T);  // elements in a tile's 16-byte word
  if (vec_lanes)
    bwd_partial_vec<<<P, DBF_TILE_THREADS, 0, s>>>(x, dy, stats, act, M, C, P, partial);
  else
    bwd_partial<<<partial_grid(C, P, cl), partial_block(cl), 0, s>>>(x, dy, stats, act, N, C, HW, cl,
                                                                      P, partial);
  bn_bwd_finalize<<<(C + DBF_FINALIZE_CHANNELS - 1) / DBF_FINALIZE_CHANNELS, 256, 0, s>>>(
      partial, P, C, M, stats, training, coef, dweight, dbias);
  if (vec_lanes)
    bwd_dx_vec<<<dbf_elementwise_blocks(total / vec), 256, 0, s>>>(x, dy, dx, stats, coef,
                                                                   total / vec, C, act);
  else
    bwd_dx<<<dbf_elementwise_blocks(total), 256, 0, s>>>(x, dy, dx, stats, coef, total, C,
                                                         cl ? 1 : HW, act);
  return static_cast<int>(cudaGetLastError());
}

// Lanes of the tiled kernels for these pointers, or 0 (the scalar kernels).
template <int DT>
int vec_lanes(int C, int cl, const void* a, const void* b, const void* c = 0) {
  if (!cl || !dbf::vec_aligned(a) || !dbf::vec_aligned(b) || (c && !dbf::vec_aligned(c))) return 0;
  return dbf::tile_lanes<DT>(C);
}

}  // namespace

extern "C" int dbf_bn_act_forward_cuda(int dtype, const void* x, void* y, float* stats,
                                       const float* weight, const float* bias,
                                       float* running_mean, float* running_var, float* partial,
                                       float* shift_k, int P, int N, int C, int HW,
                                       int channels_last, int training, float eps,
                                       float momentum, int act, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  typedef dbf::u16 h;
  const int cl = channels_last;
  switch (dtype) {
    case dbf::kBF16:
      return forward_launch<h>(bn_shift_first_bf16, bn_stats_partial_bf16, bn_stats_partial_vec_bf16,
                               bn_act_fwd_bf16, bn_act_fwd_vec_bf16,
                               vec_lanes<dbf::kBF16>(C, cl, x, y), static_cast<const h*>(x),
                               static_cast<h*>(y), stats, weight, bias, running_mean, running_var,
                               partial, shift_k, P, N, C, HW, cl, training, eps, momentum, act, s);
    case dbf::kF16:
      return forward_launch<h>(bn_shift_first_f16, bn_stats_partial_f16, bn_stats_partial_vec_f16,
                               bn_act_fwd_f16, bn_act_fwd_vec_f16,
                               vec_lanes<dbf::kF16>(C, cl, x, y), static_cast<const h*>(x),
                               static_cast<h*>(y), stats, weight, bias, running_mean, running_var,
                               partial, shift_k, P, N, C, HW, cl, training, eps, momentum, act, s);
    default:
      return forward_launch<float>(bn_shift_first_f32, bn_stats_partial_f32, bn_stats_partial_vec_f32,
                                   bn_act_fwd_f32, bn_act_fwd_vec_f32,
                                   vec_lanes<dbf::kF32>(C, cl, x, y), static_cast<const float*>(x),
                                   static_cast<float*>(y), stats, weight, bias, running_mean,
                                   running_var, partial, shift_k, P, N, C, HW, cl, training, eps,
                                   momentum, act, s);
  }
}

extern "C" int dbf_bn_act_backward_cuda(int dtype, const void* x, const void* dy, void* dx,
                                        const float* stats, float* dweight, float* dbias,
                                        float* partial, float* coef, int P, int N, int C, int HW,
                                        int channels_last, int training, int act, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  typedef dbf::u16 h;
  const int cl = channels_last;
  switch (dtype) {
    case dbf::kBF16:
      return backward_launch<h>(bn_bwd_partial_bf16, bn_bwd_partial_vec_bf16, bn_bwd_dx_bf16,
                                bn_bwd_dx_vec_bf16, vec_lanes<dbf::kBF16>(C, cl, x, dy, dx),
                                static_cast<const h*>(x), static_cast<const h*>(dy),
                                static_cast<h*>(dx), stats, dweight, dbias, partial, coef, P, N, C,
                                HW, cl, training, act, s);
    case dbf::kF16:
      return backward_launch<h>(bn_bwd_partial_f16, bn_bwd_partial_vec_f16, bn_bwd_dx_f16,
                                bn_bwd_dx_vec_f16, vec_lanes<dbf::kF16>(C, cl, x, dy, dx),
                                static_cast<const h*>(x), static_cast<const h*>(dy),
                                static_cast<h*>(dx), stats, dweight, dbias, partial, coef, P, N, C,
                                HW, cl, training, act, s);
    default:
      return backward_launch<float>(bn_bwd_partial_f32, bn_bwd_partial_vec_f32, bn_bwd_dx_f32,
                                    bn_bwd_dx_vec_f32, vec_lanes<dbf::kF32>(C, cl, x, dy, dx),
                                    static_cast<const float*>(x), static_cast<const float*>(dy),
                                    static_cast<float*>(dx), stats, dweight, dbias, partial, coef,
                                    P, N, C, HW, cl, training, act, s);
  }
}

extern "C" int dbf_cuda_device_count(int* count) {
  return static_cast<int>(cudaGetDeviceCount(count));
}

extern "C" const char* dbf_cuda_error_string(int err) {
  return cudaGetErrorString(static_cast<cudaError_t>(err));
}
#endif  // !__CUDACC_RTC__
