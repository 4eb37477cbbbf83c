// bias + activation, y = act(x + bias[c]), forward and backward, on NCHW or
// NHWC (channels_last) tensors of fp32 / bf16 / fp16; math in fp32
// (bias_act_math.cuh, shared with the CPU build). Kernels are extern "C" so
// that CuPy's RawModule finds them by name; the host launchers at the bottom
// exist only in the nvcc build.
//
// Forward (bias_act_fwd): one grid-stride pass.
// Backward (bias_act_bwd): one pass that writes dx = dy * act'(x + bias[c])
// and per (partition, channel) partial sums of it; bias_act_dbias_finalize
// sums the partials in a fixed order (deterministic), in fp64.
#include "bias_act_math.cuh"

namespace dbf {

// Threads of a backward block: in NCHW one channel's rows (consecutive
// spatial positions, coalesced); in NHWC 32 channels x 8 rows.
#define DBF_BIAS_ACT_THREADS 256

template <int DT, typename I>
__device__ __forceinline__ void bias_act_fwd_loop(const typename Elem<DT>::T* __restrict__ x,
                                                  const float* __restrict__ bias,
                                                  typename Elem<DT>::T* __restrict__ y, I total,
                                                  int C, int inner, int act) {
  typedef Elem<DT> E;
  const I cc = static_cast<I>(C), in = static_cast<I>(inner);
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    y[i] = E::store(bias_act_value(E::load(x[i]), bias[bias_act_channel<I>(i, cc, in)], act));
  }
}

// Rows m0, m0 + step, ... < m1 of channel c: writes dx, returns the sum of it.
template <int DT, typename I>
__device__ __forceinline__ float bias_act_bwd_rows(const typename Elem<DT>::T* __restrict__ x,
                                                   const typename Elem<DT>::T* __restrict__ dy,
                                                   typename Elem<DT>::T* __restrict__ dx,
                                                   float b, int act, int C, int HW, int cl,
                                                   int c, i64 m0, i64 m1, int step) {
  typedef Elem<DT> E;
  const I cc = static_cast<I>(C), hw = static_cast<I>(HW), ci = static_cast<I>(c);
  float sum = 0.0f;
  for (I m = static_cast<I>(m0); m < static_cast<I>(m1); m += static_cast<I>(step)) {
    const I idx = bias_act_offset<I>(m, ci, cc, hw, cl);
    const float g = bias_act_grad(E::load(x[idx]), b, E::load(dy[idx]), act);
    dx[idx] = E::store(g);
    sum += g;
  }
  return sum;
}

// Grid (C, P) in NCHW, ((C + 31) / 32, P) in NHWC; partial is (P, C) fp32.
template <int DT>
__device__ __forceinline__ void bias_act_bwd(const typename Elem<DT>::T* __restrict__ x,
                                             const typename Elem<DT>::T* __restrict__ dy,
                                             const float* __restrict__ bias,
                                             typename Elem<DT>::T* __restrict__ dx, int act, int N,
                                             int C, int HW, int cl, int P,
                                             float* __restrict__ partial) {
  __shared__ float s[DBF_BIAS_ACT_THREADS];
  const i64 M = static_cast<i64>(N) * HW;
  const int p = blockIdx.y;
  const i64 chunk = (M + P - 1) / P;
  const i64 m0 = p * chunk;
  const i64 m1 = m0 + chunk < M ? m0 + chunk : M;
  int c, nchan, row0, step;
  if (cl) {
    c = blockIdx.x * 32 + threadIdx.x;
    nchan = 32;
    row0 = threadIdx.y;
    step = DBF_BIAS_ACT_THREADS / 32;
  } else {
    c = blockIdx.x;
    nchan = 1;
    row0 = threadIdx.x;
    step = DBF_BIAS_ACT_THREADS;
  }
  float a = 0.0f;
  if (c < C) {
    if (static_cast<i64>(N) * C * HW < 2147483647LL)
      a = bias_act_bwd_rows<DT, unsigned int>(x, dy, dx, bias[c], act, C, HW, cl, c, m0 + row0,
                                              m1, step);
    else
      a = bias_act_bwd_rows<DT, i64>(x, dy, dx, bias[c], act, C, HW, cl, c, m0 + row0, m1, step);
  }
  const int t = threadIdx.x + threadIdx.y * blockDim.x;
  s[t] = a;
  __syncthreads();
  for (int half = DBF_BIAS_ACT_THREADS / 2; half >= nchan; half >>= 1) {
    if (t < half) s[t] += s[t + half];
    __syncthreads();
  }
  if (t < nchan && c < C) partial[static_cast<i64>(p) * C + c] = s[t];
}

}  // namespace dbf

#define DBF_BIAS_ACT_KERNELS(SUFFIX, DT)                                                         \
  extern "C" __global__ void bias_act_fwd_##SUFFIX(const dbf::Elem<DT>::T* x,                    \
                                                   const float* bias, dbf::Elem<DT>::T* y,       \
                                                   long long total, int C, int inner, int act) { \
    if (total < 2147483647LL)                                                                    \
      dbf::bias_act_fwd_loop<DT, unsigned int>(x, bias, y, static_cast<unsigned int>(total), C,  \
                                               inner, act);                                      \
    else                                                                                         \
      dbf::bias_act_fwd_loop<DT, long long>(x, bias, y, total, C, inner, act);                   \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(DBF_BIAS_ACT_THREADS) bias_act_bwd_##SUFFIX(      \
      const dbf::Elem<DT>::T* x, const dbf::Elem<DT>::T* dy, const float* bias,                  \
      dbf::Elem<DT>::T* dx, int act, int N, int C, int HW, int cl, int P, float* partial) {      \
    dbf::bias_act_bwd<DT>(x, dy, bias, dx, act, N, C, HW, cl, P, partial);                       \
  }

DBF_BIAS_ACT_KERNELS(f32, dbf::kF32)
DBF_BIAS_ACT_KERNELS(bf16, dbf::kBF16)
DBF_BIAS_ACT_KERNELS(f16, dbf::kF16)

// dbias[c] = sum over p of partial[p, c], in fp64, in order.
extern "C" __global__ void bias_act_dbias_finalize(const float* partial, int P, int C,
                                                   float* dbias) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double s = 0.0;
  for (int p = 0; p < P; ++p) s += partial[static_cast<long long>(p) * C + c];
  dbias[c] = static_cast<float>(s);
}

// ---- host launchers (nvcc build only; CuPy launches the kernels itself) ----
#if !defined(__CUDACC_RTC__)
#include "cuda_launchers.h"

extern "C" int dbf_bias_act_forward_cuda(int dtype, const void* x, const float* bias, void* y,
                                         int N, int C, int HW, int channels_last, int act,
                                         void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  typedef dbf::u16 h;
  const long long total = static_cast<long long>(N) * C * HW;
  const int inner = channels_last ? 1 : HW;
  const unsigned int g = dbf_elementwise_blocks(total);
  switch (dtype) {
    case dbf::kBF16:
      bias_act_fwd_bf16<<<g, 256, 0, s>>>(static_cast<const h*>(x), bias, static_cast<h*>(y),
                                          total, C, inner, act);
      break;
    case dbf::kF16:
      bias_act_fwd_f16<<<g, 256, 0, s>>>(static_cast<const h*>(x), bias, static_cast<h*>(y),
                                         total, C, inner, act);
      break;
    default:
      bias_act_fwd_f32<<<g, 256, 0, s>>>(static_cast<const float*>(x), bias,
                                         static_cast<float*>(y), total, C, inner, act);
  }
  return static_cast<int>(cudaGetLastError());
}

extern "C" int dbf_bias_act_backward_cuda(int dtype, const void* x, const void* dy,
                                          const float* bias, void* dx, float* dbias,
                                          float* partial, int P, int N, int C, int HW,
                                          int channels_last, int act, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  typedef dbf::u16 h;
  const int cl = channels_last;
  const dim3 grid = cl ? dim3((C + 31) / 32, P) : dim3(C, P);
  const dim3 block = cl ? dim3(32, DBF_BIAS_ACT_THREADS / 32) : dim3(DBF_BIAS_ACT_THREADS);
  switch (dtype) {
    case dbf::kBF16:
      bias_act_bwd_bf16<<<grid, block, 0, s>>>(static_cast<const h*>(x), static_cast<const h*>(dy),
                                               bias, static_cast<h*>(dx), act, N, C, HW, cl, P,
                                               partial);
      break;
    case dbf::kF16:
      bias_act_bwd_f16<<<grid, block, 0, s>>>(static_cast<const h*>(x), static_cast<const h*>(dy),
                                              bias, static_cast<h*>(dx), act, N, C, HW, cl, P,
                                              partial);
      break;
    default:
      bias_act_bwd_f32<<<grid, block, 0, s>>>(static_cast<const float*>(x),
                                              static_cast<const float*>(dy), bias,
                                              static_cast<float*>(dx), act, N, C, HW, cl, P,
                                              partial);
  }
  bias_act_dbias_finalize<<<(C + 127) / 128, 128, 0, s>>>(partial, P, C, dbias);
  return static_cast<int>(cudaGetLastError());
}
#endif  // !__CUDACC_RTC__
