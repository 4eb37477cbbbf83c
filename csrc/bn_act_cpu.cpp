// CPU (OpenMP) loops around the BatchNorm + activation math of bn_act_math.cuh.
// The activation and dtype are template parameters so that the compiler can
// vectorise each inner loop (no switch inside it). NCHW walks contiguous
// per-(n, c) planes; NHWC walks contiguous rows of C channels.
#include <omp.h>

#include <cstddef>

#include <vector>

#include "bn_act_math.cuh"
#include "act_dispatch_cpu.h"
#include "cpu_kernels.h"

DBF_NAMESPACE_BEGIN
namespace cpu {
namespace {

// Rows of NHWC accumulated in fp32 before being added to the fp64 totals.
constexpr int kRowBlock = 256;
// Below this many elements a parallel region costs more than it saves (thread
// wake-up is tens of microseconds; batch-1 inference lives here).
constexpr i64 kParallelMin = 1 << 16;

inline bool parallel_worth(int N, int C, int HW) {
  return static_cast<i64>(N) * C * HW >= kParallelMin;
}

// mode 0: sums of (x - k) and (x - k)^2; mode 1: sums of g and g * xhat.
template <int DT, int ACT, int MODE>
void channel_sums(const void* xv, const void* dyv, const float* stats, const float* shift_k,
                  int N, int C, int HW, int cl, std::vector<double>& s1,
                  std::vector<double>& s2) {
  typedef Elem<DT> E;
  const typename E::T* x = static_cast<const typename E::T*>(xv);
  const typename E::T* dy = static_cast<const typename E::T*>(dyv);
  const float* mean = stats;
  const float* invstd = stats ? stats + C : nullptr;
  const float* scale = stats ? stats + 2 * C : nullptr;
  const float* beta = stats ? stats + 3 * C : nullptr;
  s1.assign(C, 0.0);
  s2.assign(C, 0.0);
  if (!cl) {
    // One partial per (n, c) plane, then a fixed-order reduction over n.
    std::vector<double> p1(static_cast<std::size_t>(N) * C), p2(static_cast<std::size_t>(N) * C);
#pragma omp parallel for schedule(static) if (parallel_worth(N, C, HW))
    for (i64 nc = 0; nc < static_cast<i64>(N) * C; ++nc) {
      const int c = static_cast<int>(nc % C);
      const typename E::T* xp = x + nc * HW;
      float a = 0.0f, b = 0.0f;
      if (MODE == 0) {
        const float k = shift_k[c];
#pragma omp simd reduction(+ : a, b)
        for (int s = 0; s < HW; ++s) {
          const float d = E::load(xp[s]) - k;
          a += d;
          b += d * d;
        }
      } else {
        const typename E::T* dyp = dy + nc * HW;
        const float sc = scale[c], bt = beta[c], mu = mean[c], is = invstd[c];
#pragma omp simd reduction(+ : a, b)
        for (int s = 0; s < HW; ++s) {
          const float xs = E::load(xp[s]);
          const float g = E::load(dyp[s]) * act_grad(bn_z(xs, mu, sc, bt), ACT);
          a += g;
          b += g * (xs - mu) * is;
        }
      }
      p1[nc] = a;
      p2[nc] = b;
    }
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c) {
        s1[c] += p1[static_cast<std::size_t>(n) * C + c];
        s2[c] += p2[static_cast<std::size_t>(n) * C + c];
      }
    return;
  }
  // NHWC: a fixed number of row chunks (deterministic whatever the thread
  // count), each with its own per-channel fp64 sums.
  const i64 M = static_cast<i64>(N) * HW;
  const int P = static_cast<int>(M < 64 ? M : 64);
  std::vector<double> p1(static_cast<std::size_t>(P) * C, 0.0), p2(static_cast<std::size_t>(P) * C, 0.0);
#pragma omp parallel if (parallel_worth(N, C, HW))
  {
    std::vector<float> a(C), b(C);
#pragma omp for schedule(static)
    for (int p = 0; p < P; ++p) {
      const i64 m0 = M * p / P, m1 = M * (p + 1) / P;
      double* q1 = &p1[static_cast<std::size_t>(p) * C];
      double* q2 = &p2[static_cast<std::size_t>(p) * C];
      for (i64 mb = m0; mb < m1; mb += kRowBlock) {
        const i64 me = mb + kRowBlock < m1 ? mb + kRowBlock : m1;
        for (int c = 0; c < C; ++c) a[c] = b[c] = 0.0f;
        float* pa = a.data();
        float* pb = b.data();
        for (i64 m = mb; m < me; ++m) {
          const typename E::T* xr = x + m * C;
          if (MODE == 0) {
#pragma omp simd
            for (int c = 0; c < C; ++c) {
              const float d = E::load(xr[c]) - shift_k[c];
              pa[c] += d;
              pb[c] += d * d;
            }
          } else {
            const typename E::T* dyr = dy + m * C;
#pragma omp simd
            for (int c = 0; c < C; ++c) {
              const float xs = E::load(xr[c]);
              const float g =
                  E::load(dyr[c]) * act_grad(bn_z(xs, mean[c], scale[c], beta[c]), ACT);
              pa[c] += g;
              pb[c] += g * (xs - mean[c]) * invstd[c];
            }
          }
        }
        for (int c = 0; c < C; ++c) {
          q1[c] += a[c];
          q2[c] += b[c];
        }
      }
    }
  }
  for (int p = 0; p < P; ++p)
    for (int c = 0; c < C; ++c) {
      s1[c] += p1[static_cast<std::size_t>(p) * C + c];
      s2[c] += p2[static_cast<std::size_t>(p) * C + c];
    }
}

// y = act(z), or (BACKWARD) dx = scale * g + (x - mean) * cx + c1.
template <int DT, int ACT, bool BACKWARD>
void elementwise(const void* xv, const void* dyv, void* outv, const float* stats,
                 const float* coef, int N, int C, int HW, int cl) {
  typedef Elem<DT> E;
  const typename E::T* x = static_cast<const typename E::T*>(xv);
  const typename E::T* dy = static_cast<const typename E::T*>(dyv);
  typename E::T* out = static_cast<typename E::T*>(outv);
  const float* mean = stats;
  const float* scale = stats + 2 * C;
  const float* beta = stats + 3 * C;
  const float* cx = coef;
  const float* c1 = coef ? coef + C : nullptr;
  if (!cl) {
#pragma omp parallel for schedule(static) if (parallel_worth(N, C, HW))
    for (i64 nc = 0; nc < static_cast<i64>(N) * C; ++nc) {
      const int c = static_cast<int>(nc % C);
      const float mu = mean[c], sc = scale[c], bt = beta[c];
      const typename E::T* xp = x + nc * HW;
      typename E::T* op = out + nc * HW;
      if (!BACKWARD) {
#pragma omp simd
        for (int s = 0; s < HW; ++s)
          op[s] = E::store(act_forward(bn_z(E::load(xp[s]), mu, sc, bt), ACT));
      } else {
        const typename E::T* dyp = dy + nc * HW;
        const float kx = cx[c], k1 = c1[c];
#pragma omp simd
        for (int s = 0; s < HW; ++s) {
          const float xs = E::load(xp[s]);
          const float g = E::load(dyp[s]) * act_grad(bn_z(xs, mu, sc, bt), ACT);
          op[s] = E::store(sc * g + (xs - mu) * kx + k1);
        }
      }
    }
    return;
  }
  const i64 M = static_cast<i64>(N) * HW;
#pragma omp parallel for schedule(static) if (parallel_worth(N, C, HW))
  for (i64 m = 0; m < M; ++m) {
    const typename E::T* xr = x + m * C;
    typename E::T* orow = out + m * C;
    if (!BACKWARD) {
#pragma omp simd
      for (int c = 0; c < C; ++c)
        orow[c] = E::store(act_forward(bn_z(E::load(xr[c]), mean[c], scale[c], beta[c]), ACT));
    } else {
      const typename E::T* dyr = dy + m * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        const float xs = E::load(xr[c]);
        const float g = E::load(dyr[c]) * act_grad(bn_z(xs, mean[c], scale[c], beta[c]), ACT);
        orow[c] = E::store(scale[c] * g + (xs - mean[c]) * cx[c] + c1[c]);
      }
    }
  }
}

template <int DT, int ACT>
void forward_t(const void* x, void* y, float* stats, const float* weight, const float* bias,
               float* running_mean, float* running_var, int N, int C, int HW, int cl,
               int training, float eps, float momentum) {
  typedef Elem<DT> E;
  const typename E::T* xt = static_cast<const typename E::T*>(x);
  std::vector<double> s1, s2;
  std::vector<float> k(C, 0.0f);
  if (training) {
    for (int c = 0; c < C; ++c) k[c] = E::load(xt[cl ? c : static_cast<i64>(c) * HW]);
    channel_sums<DT, ACT, 0>(x, nullptr, nullptr, k.data(), N, C, HW, cl, s1, s2);
  }
  const i64 count = static_cast<i64>(N) * HW;
  for (int c = 0; c < C; ++c) {
    const ChannelStats st = bn_channel_stats(
        training ? s1[c] : 0.0, training ? s2[c] : 0.0, k[c], count, weight[c], bias[c], eps,
        momentum, training != 0, running_mean ? running_mean + c : nullptr,
        running_var ? running_var + c : nullptr);
    stats[c] = st.mean;
    stats[C + c] = st.invstd;
    stats[2 * C + c] = st.scale;
    stats[3 * C + c] = st.bias;
  }
  elementwise<DT, ACT, false>(x, nullptr, y, stats, nullptr, N, C, HW, cl);
}

template <int DT, int ACT>
void backward_t(const void* x, const void* dy, void* dx, const float* stats, float* dweight,
                float* dbias, int N, int C, int HW, int cl, int training) {
  std::vector<double> sg, sgx;
  channel_sums<DT, ACT, 1>(x, dy, stats, nullptr, N, C, HW, cl, sg, sgx);
  std::vector<float> coef(2 * static_cast<std::size_t>(C));
  const i64 count = static_cast<i64>(N) * HW;
  for (int c = 0; c < C; ++c) {
    const ChannelGrad g =
        bn_channel_grad(sg[c], sgx[c], count, stats[C + c], stats[2 * C + c], training != 0);
    coef[c] = g.coef_x;
    coef[C + c] = g.coef_1;
    dweight[c] = static_cast<float>(sgx[c]);
    dbias[c] = static_cast<float>(sg[c]);
  }
  elementwise<DT, ACT, true>(x, dy, dx, stats, coef.data(), N, C, HW, cl);
}


template <int DT, int ACT>
struct Fwd {
  template <typename... A>
  static void run(A... a) { forward_t<DT, ACT>(a...); }
};
template <int DT, int ACT>
struct Bwd {
  template <typename... A>
  static void run(A... a) { backward_t<DT, ACT>(a...); }
};

}  // namespace

void bn_act_forward(int dtype, const void* x, void* y, float* stats, const float* weight,
                    const float* bias, float* running_mean, float* running_var, int N, int C,
                    int HW, int channels_last, int training, float eps, float momentum, int act) {
  if (channels_last && dtype != kF16 && nhwc_kernels_enabled()) {  // the vectorised loops
    NhwcArgs a{};
    a.dtype = dtype, a.act = act, a.N = N, a.H = 1, a.W = HW, a.C = C, a.training = training;
    a.x = x, a.y = y, a.stats = stats, a.weight = weight, a.bias = bias;
    a.running_mean = running_mean, a.running_var = running_var, a.eps = eps, a.momentum = momentum;
    bn_act_nhwc(a, true);
    return;
  }
  dispatch_dt_act<Fwd>(dtype, act, x, y, stats, weight, bias, running_mean, running_var, N, C, HW,
                       channels_last, training, eps, momentum);
}

void bn_act_backward(int dtype, const void* x, const void* dy, void* dx, const float* stats,
                     float* dweight, float* dbias, int N, int C, int HW, int channels_last,
                     int training, int act) {
  if (channels_last && dtype != kF16 && nhwc_kernels_enabled()) {
    NhwcArgs a{};
    a.dtype = dtype, a.act = act, a.N = N, a.H = 1, a.W = HW, a.C = C, a.training = training;
    a.x = x, a.dy = dy, a.dx = dx, a.stats = const_cast<float*>(stats);
    a.dweight = dweight, a.dbias = dbias;
    bn_act_nhwc(a, false);
    return;
  }
  dispatch_dt_act<Bwd>(dtype, act, x, dy, dx, stats, dweight, dbias, N, C, HW, channels_last,
                       training);
}

}  // namespace cpu
DBF_NAMESPACE_END
