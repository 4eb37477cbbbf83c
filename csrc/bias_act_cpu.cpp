// CPU (OpenMP) loops around bias_act_math.cuh. The activation and dtype are
// template parameters so that each inner loop vectorises (no switch inside
// it). Both layouts are N rows (one per image) of L = C*H*W values in memory
// order, with the bias of each position in a table of L floats (NCHW:
// bias[j / HW], NHWC: bias[j % C]): the inner loops are long and contiguous
// whatever H*W is (a 3x3 map in NCHW would leave 9-element loops). Tasks are
// (image or block of images, chunk of the row), so one image is parallel too.
// The bias gradient is summed in fp32 per block of images, then over the
// blocks and positions in fp64 in a fixed order: deterministic whatever the
// thread count.
#include <cstddef>
#include <vector>

#include "bias_act_math.cuh"
#include "act_dispatch_cpu.h"
#include "cpu_kernels.h"

DBF_NAMESPACE_BEGIN
namespace cpu {
namespace {

constexpr i64 kBiasChunk = 4096;     // values of a row per task
constexpr i64 kBiasImageBlocks = 32;  // backward: the images are summed in this many blocks
// Below this many elements a parallel region costs more than it saves.
constexpr i64 kBiasParallelMin = 1 << 16;

// Written in memory order (no division per element, no strided stores).
std::vector<float> bias_pattern(const float* bias, int C, int HW, int cl) {
  std::vector<float> pat(static_cast<std::size_t>(C) * HW);
  float* p = pat.data();
  if (cl) {
    for (int s = 0; s < HW; ++s)
      for (int c = 0; c < C; ++c) p[bias_act_row_pos(c, s, C, HW, cl)] = bias[c];
  } else {
    for (int c = 0; c < C; ++c)
      for (int s = 0; s < HW; ++s) p[bias_act_row_pos(c, s, C, HW, cl)] = bias[c];
  }
  return pat;
}

template <int DT, int ACT>
void bias_act_forward_t(const void* xv, const float* bias, void* yv, int N, int C, int HW,
                        int cl) {
  typedef Elem<DT> E;
  const typename E::T* x = static_cast<const typename E::T*>(xv);
  typename E::T* y = static_cast<typename E::T*>(yv);
  const std::vector<float> pat = bias_pattern(bias, C, HW, cl);
  const float* b = pat.data();
  const i64 L = static_cast<i64>(C) * HW, chunks = (L + kBiasChunk - 1) / kBiasChunk;
#pragma omp parallel for schedule(static) if (N * L >= kBiasParallelMin)
  for (i64 t = 0; t < N * chunks; ++t) {
    const i64 j0 = (t % chunks) * kBiasChunk, j1 = j0 + kBiasChunk < L ? j0 + kBiasChunk : L;
    const typename E::T* xr = x + (t / chunks) * L;
    typename E::T* yr = y + (t / chunks) * L;
#pragma omp simd
    for (i64 j = j0; j < j1; ++j) yr[j] = E::store(bias_act_value(E::load(xr[j]), b[j], ACT));
  }
}

template <int DT, int ACT>
void bias_act_backward_t(const void* xv, const void* dyv, const float* bias, void* dxv,
                         float* dbias, int N, int C, int HW, int cl) {
  typedef Elem<DT> E;
  const typename E::T* x = static_cast<const typename E::T*>(xv);
  const typename E::T* dy = static_cast<const typename E::T*>(dyv);
  typename E::T* dx = static_cast<typename E::T*>(dxv);
  const std::vector<float> pat = bias_pattern(bias, C, HW, cl);
  const float* b = pat.data();
  const i64 L = static_cast<i64>(C) * HW, chunks = (L + kBiasChunk - 1) / kBiasChunk;
  const i64 blocks = N < kBiasImageBlocks ? N : kBiasImageBlocks;
  std::vector<float> part(static_cast<std::size_t>(blocks) * L);  // per block of images
  float* pp = part.data();
#pragma omp parallel for schedule(static) if (N * L >= kBiasParallelMin)
  for (i64 t = 0; t < blocks * chunks; ++t) {
    const i64 blk = t / chunks, j0 = (t % chunks) * kBiasChunk;
    const i64 j1 = j0 + kBiasChunk < L ? j0 + kBiasChunk : L;
    float* acc = pp + blk * L;
    for (i64 n = blk * N / blocks; n < (blk + 1) * N / blocks; ++n) {
      const bool first = n == blk * N / blocks;
      const i64 o = n * L;
#pragma omp simd
      for (i64 j = j0; j < j1; ++j) {
        const float g = bias_act_grad(E::load(x[o + j]), b[j], E::load(dy[o + j]), ACT);
        dx[o + j] = E::store(g);
        acc[j] = first ? g : acc[j] + g;
      }
    }
  }
  // Over the blocks (in order, in parallel over positions), then per channel.
  std::vector<double> pos(static_cast<std::size_t>(L));
  double* ps = pos.data();
#pragma omp parallel for schedule(static) if (blocks * L >= kBiasParallelMin)
  for (i64 j = 0; j < L; ++j) {
    double s = 0.0;
    for (i64 blk = 0; blk < blocks; ++blk) s += pp[blk * L + j];
    ps[j] = s;
  }
  std::vector<double> sum(static_cast<std::size_t>(C), 0.0);
  if (cl) {  // in memory order, as bias_pattern
    for (int s = 0; s < HW; ++s)
      for (int c = 0; c < C; ++c) sum[c] += ps[bias_act_row_pos(c, s, C, HW, cl)];
  } else {
    for (int c = 0; c < C; ++c)
      for (int s = 0; s < HW; ++s) sum[c] += ps[bias_act_row_pos(c, s, C, HW, cl)];
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


}  // namespace

void bias_act_forward(int dtype, const void* x, const float* bias, void* y, int N, int C, int HW,
                      int channels_last, int act) {
  dispatch_dt_act<BiasActFwd>(dtype, act, x, bias, y, N, C, HW, channels_last);
}

void bias_act_backward(int dtype, const void* x, const void* dy, const float* bias, void* dx,
                       float* dbias, int N, int C, int HW, int channels_last, int act) {
  dispatch_dt_act<BiasActBwd>(dtype, act, x, dy, bias, dx, dbias, N, C, HW, channels_last);
}

}  // namespace cpu
DBF_NAMESPACE_END
