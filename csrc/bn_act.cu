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
#include "bn_act_math.cuh"

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
  }

DBF_BN_KERNELS(f32, dbf::kF32)
DBF_BN_KERNELS(bf16, dbf::kBF16)
DBF_BN_KERNELS(f16, dbf::kF16)

// Per-channel finalize of the statistics: stats = [mean | invstd | scale | bias].
// In eval mode (training == 0) the running statistics are used and the partials
// are not read.
extern "C" __global__ void bn_stats_finalize(const float* partial, const float* shift_k, int P,
                                             int C, long long count, const float* weight,
                                             const float* bias, float eps, float momentum,
                                             int training, float* running_mean,
                                             float* running_var, float* stats) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double s = 0.0, ss = 0.0;
  if (training) {
    for (int p = 0; p < P; ++p) {
      s += partial[(static_cast<long long>(p) * C + c) * 2];
      ss += partial[(static_cast<long long>(p) * C + c) * 2 + 1];
    }
  }
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
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double sg = 0.0, sgx = 0.0;
  for (int p = 0; p < P; ++p) {
    sg += partial[(static_cast<long long>(p) * C + c) * 2];
    sgx += partial[(static_cast<long long>(p) * C + c) * 2 + 1];
  }
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

}  // namespace

extern "C" int dbf_bn_act_forward_cuda(int dtype, const void* x, void* y, float* stats,
                                       const float* weight, const float* bias,
                                       float* running_mean, float* running_var, float* partial,
                                       float* shift_k, int P, int N, int C, int HW,
                                       int channels_last, int training, float eps,
                                       float momentum, int act, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  typedef dbf::u16 h;
  const long long total = static_cast<long long>(N) * C * HW;
  const int cl = channels_last;
  if (training) {
    switch (dtype) {
      case dbf::kBF16:
        bn_shift_first_bf16<<<(C + 127) / 128, 128, 0, s>>>(static_cast<const h*>(x), C, HW, cl, shift_k);
        bn_stats_partial_bf16<<<partial_grid(C, P, cl), partial_block(cl), 0, s>>>(
            static_cast<const h*>(x), N, C, HW, cl, P, partial);
        break;
      case dbf::kF16:
        bn_shift_first_f16<<<(C + 127) / 128, 128, 0, s>>>(static_cast<const h*>(x), C, HW, cl, shift_k);
        bn_stats_partial_f16<<<partial_grid(C, P, cl), partial_block(cl), 0, s>>>(
            static_cast<const h*>(x), N, C, HW, cl, P, partial);
        break;
      default:
        bn_shift_first_f32<<<(C + 127) / 128, 128, 0, s>>>(static_cast<const float*>(x), C, HW, cl, shift_k);
        bn_stats_partial_f32<<<partial_grid(C, P, cl), partial_block(cl), 0, s>>>(
            static_cast<const float*>(x), N, C, HW, cl, P, partial);
    }
  }
  bn_stats_finalize<<<(C + 127) / 128, 128, 0, s>>>(partial, shift_k, P, C,
                                                    static_cast<long long>(N) * HW, weight, bias,
                                                    eps, momentum, training, running_mean,
                                                    running_var, stats);
  const int chan_div = cl ? 1 : HW;
  switch (dtype) {
    case dbf::kBF16:
      bn_act_fwd_bf16<<<dbf_elementwise_blocks(total), 256, 0, s>>>(
          static_cast<const h*>(x), static_cast<h*>(y), stats, total, C, chan_div, act);
      break;
    case dbf::kF16:
      bn_act_fwd_f16<<<dbf_elementwise_blocks(total), 256, 0, s>>>(
          static_cast<const h*>(x), static_cast<h*>(y), stats, total, C, chan_div, act);
      break;
    default:
      bn_act_fwd_f32<<<dbf_elementwise_blocks(total), 256, 0, s>>>(
          static_cast<const float*>(x), static_cast<float*>(y), stats, total, C, chan_div, act);
  }
  return static_cast<int>(cudaGetLastError());
}

extern "C" int dbf_bn_act_backward_cuda(int dtype, const void* x, const void* dy, void* dx,
                                        const float* stats, float* dweight, float* dbias,
                                        float* partial, float* coef, int P, int N, int C, int HW,
                                        int channels_last, int training, int act, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  typedef dbf::u16 h;
  const long long total = static_cast<long long>(N) * C * HW;
  const int cl = channels_last;
  const int chan_div = cl ? 1 : HW;
  const dim3 pg = partial_grid(C, P, cl), pb = partial_block(cl);
  const unsigned int eb = dbf_elementwise_blocks(total);
  switch (dtype) {
    case dbf::kBF16:
      bn_bwd_partial_bf16<<<pg, pb, 0, s>>>(static_cast<const h*>(x), static_cast<const h*>(dy),
                                             stats, act, N, C, HW, cl, P, partial);
      break;
    case dbf::kF16:
      bn_bwd_partial_f16<<<pg, pb, 0, s>>>(static_cast<const h*>(x), static_cast<const h*>(dy),
                                            stats, act, N, C, HW, cl, P, partial);
      break;
    default:
      bn_bwd_partial_f32<<<pg, pb, 0, s>>>(static_cast<const float*>(x),
                                            static_cast<const float*>(dy), stats, act, N, C, HW,
                                            cl, P, partial);
  }
  bn_bwd_finalize<<<(C + 127) / 128, 128, 0, s>>>(partial, P, C, static_cast<long long>(N) * HW,
                                                  stats, training, coef, dweight, dbias);
  switch (dtype) {
    case dbf::kBF16:
      bn_bwd_dx_bf16<<<eb, 256, 0, s>>>(static_cast<const h*>(x), static_cast<const h*>(dy),
                                         static_cast<h*>(dx), stats, coef, total, C, chan_div, act);
      break;
    case dbf::kF16:
      bn_bwd_dx_f16<<<eb, 256, 0, s>>>(static_cast<const h*>(x), static_cast<const h*>(dy),
                                        static_cast<h*>(dx), stats, coef, total, C, chan_div, act);
      break;
    default:
      bn_bwd_dx_f32<<<eb, 256, 0, s>>>(static_cast<const float*>(x), static_cast<const float*>(dy),
                                        static_cast<float*>(dx), stats, coef, total, C, chan_div,
                                        act);
  }
  return static_cast<int>(cudaGetLastError());
}

extern "C" int dbf_cuda_device_count(int* count) {
  return static_cast<int>(cudaGetDeviceCount(count));
}

extern "C" const char* dbf_cuda_error_string(int err) {
  return cudaGetErrorString(static_cast<cudaError_t>(err));
}
#endif  // !__CUDACC_RTC__
