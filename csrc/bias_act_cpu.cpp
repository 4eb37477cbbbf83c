// CPU (OpenMP) loops around bias_act_math.cuh. The activation and dtype are
// template parameters so that each inner loop vectorises (no switch inside
// it). NCHW walks contiguous per-(n, c) planes; NHWC contiguous rows of C
// channels. The bias gradient is summed in fp32 per plane (NCHW) or per block
// of rows (NHWC), then over those in fp64 in a fixed order: deterministic
// whatever the thread count.
#include <cstddef>
#include <vector>

#include "bias_act_math.cuh"
#include "cpu_kernels.h"

DBF_NAMESPACE_BEGIN
namespace cpu {
namespace {

// Rows of NHWC summed in fp32 before the fp64 total.
constexpr int kBiasRowBlock = 256;
// Below this many elements a parallel region costs more than it saves.
constexpr i64 kBiasParallelMin = 1 << 16;

template <int DT, int ACT>
void bias_act_forward_t(const void* xv, const float* bias, void* yv, int N, int C, int HW,
                        int cl) {
  typedef Elem<DT> E;
  const typename E::T* x = static_cast<const typename E::T*>(xv);
  typename E::T* y = static_cast<typename E::T*>(yv);
  const i64 total = static_cast<i64>(N) * C * HW;
  if (!cl) {
#pragma omp parallel for schedule(static) if (total >= kBiasParallelMin)
    for (i64 nc = 0; nc < static_cast<i64>(N) * C; ++nc) {
      const float b = bias[nc % C];
      const typename E::T* xp = x + nc * HW;
      typename E::T* yp = y + nc * HW;
#pragma omp simd
      for (int s = 0; s < HW; ++s) yp[s] = E::store(bias_act_value(E::load(xp[s]), b, ACT));
    }
    return;
  }
#pragma omp parallel for schedule(static) if (total >= kBiasParallelMin)
  for (i64 m = 0; m < static_cast<i64>(N) * HW; ++m) {
    const typename E::T* xr = x + m * C;
    typename E::T* yr = y + m * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) yr[c] = E::store(bias_act_value(E::load(xr[c]), bias[c], ACT));
  }
}

template <int DT, int ACT>
void bias_act_backward_t(const void* xv, const void* dyv, const float* bias, void* dxv,
                         float* dbias, int N, int C, int HW, int cl) {
  typedef Elem<DT> E;
  const typename E::T* x = static_cast<const typename E::T*>(xv);
  const typename E::T* dy = static_cast<const typename E::T*>(dyv);
  typename E::T* dx = static_cast<typename E::T*>(dxv);
  const i64 total = static_cast<i64>(N) * C * HW;
  std::vector<double> sum(static_cast<std::size_t>(C), 0.0);
  if (!cl) {
    std::vector<float> plane(static_cast<std::size_t>(N) * C);
#pragma omp parallel for schedule(static) if (total >= kBiasParallelMin)
    for (i64 nc = 0; nc < static_cast<i64>(N) * C; ++nc) {
      const float b = bias[nc % C];
      const i64 o = nc * HW;
      float a = 0.0f;
#pragma omp simd reduction(+ : a)
      for (int s = 0; s < HW; ++s) {
        const float g = bias_act_grad(E::load(x[o + s]), b, E::load(dy[o + s]), ACT);
        dx[o + s] = E::store(g);
        a += g;
      }
      plane[nc] = a;
    }
    for (i64 nc = 0; nc < static_cast<i64>(N) * C; ++nc) sum[nc % C] += plane[nc];
  } else {
    const i64 M = static_cast<i64>(N) * HW;
    const i64 blocks = (M + kBiasRowBlock - 1) / kBiasRowBlock;
    std::vector<float> part(static_cast<std::size_t>(blocks) * C, 0.0f);
#pragma omp parallel for schedule(static) if (total >= kBiasParallelMin)
    for (i64 blk = 0; blk < blocks; ++blk) {
      float* acc = part.data() + blk * C;
      const i64 m1 = (blk + 1) * kBiasRowBlock < M ? (blk + 1) * kBiasRowBlock : M;
      for (i64 m = blk * kBiasRowBlock; m < m1; ++m) {
        const i64 o = m * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          const float g = bias_act_grad(E::load(x[o + c]), bias[c], E::load(dy[o + c]), ACT);
          dx[o + c] = E::store(g);
          acc[c] += g;
        }
      }
    }
    for (i64 blk = 0; blk < blocks; ++blk)
      for (int c = 0; c < C; ++c) sum[c] += part[static_cast<std::size_t>(blk) * C + c];
  }
  for (int c = 0; c < C; ++c) dbias[c] = static_cast<float>(sum[c]);
}

template <int DT, int ACT>
struct BiasActFwd {
  template <typename... A>
  static void run(A... a) { bias_act_forward_t<DT, ACT>(a...); }
};
template <int DT, int ACT>
struct BiasActBwd {
  template <typename... A>
  static void run(A... a) { bias_act_backward_t<DT, ACT>(a...); }
};

// dtype x activation, resolved once per call outside the loops.
template <template <int, int> class F, typename... Args>
void bias_act_dispatch(int dtype, int act, Args... args) {
#define DBF_BIAS_ACTS(DT)                                \
  switch (act) {                                         \
    case kRelu: F<DT, kRelu>::run(args...); return;      \
    case kGelu: F<DT, kGelu>::run(args...); return;      \
    case kSilu: F<DT, kSilu>::run(args...); return;      \
    default: F<DT, kIdentity>::run(args...); return;     \
  }
  switch (dtype) {
    case kBF16: DBF_BIAS_ACTS(kBF16)
    case kF16: DBF_BIAS_ACTS(kF16)
    default: DBF_BIAS_ACTS(kF32)
  }
#undef DBF_BIAS_ACTS
}

}  // namespace

void bias_act_forward(int dtype, const void* x, const float* bias, void* y, int N, int C, int HW,
                      int channels_last, int act) {
  bias_act_dispatch<BiasActFwd>(dtype, act, x, bias, y, N, C, HW, channels_last);
}

void bias_act_backward(int dtype, const void* x, const void* dy, const float* bias, void* dx,
                       float* dbias, int N, int C, int HW, int channels_last, int act) {
  bias_act_dispatch<BiasActBwd>(dtype, act, x, dy, bias, dx, dbias, N, C, HW, channels_last);
}

}  // namespace cpu
DBF_NAMESPACE_END
