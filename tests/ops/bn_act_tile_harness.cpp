// CPU harness of bn_act.cu's tiled kernels (tests/ops/test_bn_act_tile.py):
// it runs bn_act_tile.cuh's per-thread steps for every thread of every block,
// phase by phase where the kernel has a barrier, so the GPU's indexing,
// vectors and reduction order are exercised without a GPU.
#include <vector>

#include "bn_act_tile.cuh"

namespace {

template <int DT>
int partial(int mode, const void* xv, const void* dyv, const float* stats, int act, long long M,
            int C, int P, float* out, float* shift_k) {
  typedef typename dbf::Elem<DT>::T T;
  const T* x = static_cast<const T*>(xv);
  const T* dy = static_cast<const T*>(dyv);
  const int lanes = dbf::tile_lanes<DT>(C);
  if (!lanes) return 0;
  const int V = dbf::Tile<DT>::kVec;
  std::vector<float> s1(DBF_TILE_THREADS * V), s2(DBF_TILE_THREADS * V);
  for (int p = 0; p < P; ++p) {  // one block a partition
    long long m0, m1;
    dbf::partition_rows(M, P, p, &m0, &m1);
    for (int t = 0; t < DBF_TILE_THREADS; ++t) {
      if (mode == 0)
        dbf::tile_partial_thread<DT, 0>(x, dy, stats, act, C, lanes, m0, m1, t, p, shift_k,
                                        s1.data(), s2.data());
      else
        dbf::tile_partial_thread<DT, 1>(x, dy, stats, act, C, lanes, m0, m1, t, p, shift_k,
                                        s1.data(), s2.data());
    }
    for (int step = DBF_TILE_THREADS / lanes / 2; step >= 1; step >>= 1)
      for (int t = 0; t < DBF_TILE_THREADS; ++t) dbf::tile_reduce_step<DT>(s1.data(), s2.data(), t, lanes, step);
    for (int t = 0; t < DBF_TILE_THREADS; ++t)
      dbf::tile_write_partial<DT>(s1.data(), s2.data(), t, lanes, C, p, out);
  }
  return lanes;
}

template <int DT>
void elementwise(int dx_pass, const void* x, const void* dy, void* out, const float* stats,
                 const float* coef, long long total, int C, int act) {
  typedef typename dbf::Elem<DT>::T T;
  const long long nvec = total / dbf::Tile<DT>::kVec;
  for (long long v = 0; v < nvec; ++v) {
    if (dx_pass)
      dbf::tile_dx_vec<DT>(static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(out),
                           stats, coef, v, C, act);
    else
      dbf::tile_forward_vec<DT>(static_cast<const T*>(x), static_cast<T*>(out), stats, v, C, act);
  }
}

}  // namespace

extern "C" {

int harness_tile_lanes(int dt, int C) {
  return dt == dbf::kF32 ? dbf::tile_lanes<dbf::kF32>(C)
                         : (dt == dbf::kBF16 ? dbf::tile_lanes<dbf::kBF16>(C) : dbf::tile_lanes<dbf::kF16>(C));
}

int harness_partial(int dt, int mode, const void* x, const void* dy, const float* stats, int act,
                    long long M, int C, int P, float* out, float* shift_k) {
  if (dt == dbf::kF32) return partial<dbf::kF32>(mode, x, dy, stats, act, M, C, P, out, shift_k);
  if (dt == dbf::kBF16) return partial<dbf::kBF16>(mode, x, dy, stats, act, M, C, P, out, shift_k);
  return partial<dbf::kF16>(mode, x, dy, stats, act, M, C, P, out, shift_k);
}

void harness_elementwise(int dt, int dx_pass, const void* x, const void* dy, void* out,
                         const float* stats, const float* coef, long long total, int C, int act) {
  if (dt == dbf::kF32) elementwise<dbf::kF32>(dx_pass, x, dy, out, stats, coef, total, C, act);
  else if (dt == dbf::kBF16) elementwise<dbf::kBF16>(dx_pass, x, dy, out, stats, coef, total, C, act);
  else elementwise<dbf::kF16>(dx_pass, x, dy, out, stats, coef, total, C, act);
}
}
