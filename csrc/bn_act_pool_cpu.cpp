// BatchNorm + activation on NHWC (channels_last) tensors, optionally fused
// with the 2x2 max-pool before it, in as few passes over memory as the math
// allows (fp32/bf16 storage, fp32 math, AVX-512 through bn_act_vec.h):
//
//   forward   pass 1  read x (full size); write the pooled tensor p and a
//                     one-byte argmax code per pooled element; per-channel
//                     sums of p (the batch statistics)            [pool only]
//             pass 1' read x; per-channel sums                     [no pool]
//             pass 2  read p (or x); write y = act(bn(p))
//   backward  pass 1  read p, dy; per-channel sums of g = dy * act'(z) and of
//                     g * xhat (z recomputed from p); write g (fp32)
//             pass 2  read p, g (+ codes); write dx, scattered to the
//                     full-size gradient with zeros elsewhere       [pool]
//                     (or, asked for, the pool's own gradient, p-sized: the
//                     before-pool conv's kernels read it with the codes)
//
// Statistics cannot join pass 2: normalising needs the finished sums. The
// sums are deterministic whatever the thread count: a fixed number of row
// chunks, fp32 sums over blocks of rows added to per-chunk fp64 partials,
// partials combined in chunk order. This is the order of bn_act_cpu.cpp's
// NHWC loops, and the element math is the same, so without the pool the
// results are bit-identical to it, and with the pool bit-identical to ATen's
// max-pool followed by it (ties keep the first window position, as ATen).

#include <omp.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "cpu_kernels.h"
#include "bn_act_vec.h"

DBF_NAMESPACE_BEGIN
namespace cpu {
namespace {

using namespace vec;

constexpr int kRowBlock = 256;  // rows summed in fp32 before the fp64 partials
constexpr int kChunks = 64;     // fixed row chunks of the reductions
constexpr i64 kParallelMin = 1 << 16;

// On by default for plain bn_act (no pool) too: with SiLU (the recipe's
// activation) these loops ran forward + backward 1.3-1.5x faster than
// bn_act_cpu.cpp's on Zen 4 (batch 1536, the net's three shapes; GELU had
// measured 0.8-1.1x, so they had been off); the fused pool op always uses them.
bool g_enabled = true;
// Seconds of the last call's two passes (benchmarks report each pass's GB/s).
double g_pass_s[2] = {0.0, 0.0};

// Geometry: x is (N, H, W, C); the rows that BN sees ("src") are the pooled
// (N, H/2, W/2) pixels with pool, else x's own N*H*W pixels.
struct Geo {
  int N, H, W, C, pool, Ho, Wo, Cp;
  i64 M;  // src rows
  Geo(int n, int h, int w, int c, int p) : N(n), H(h), W(w), C(c), pool(p) {
    Ho = p ? h / 2 : h;
    Wo = p ? w / 2 : w;
    Cp = (c + L - 1) / L * L;
    M = static_cast<i64>(n) * Ho * Wo;
  }
  bool parallel() const { return static_cast<i64>(N) * H * W * C >= kParallelMin; }
};

// Per-channel values copied into zero-padded arrays (whole-vector loads).
struct Padded {
  std::vector<float> v;
  Padded(const float* src, int C, int Cp) : v(Cp, 0.0f) {
    if (src) std::memcpy(v.data(), src, sizeof(float) * C);
  }
  const float* p() const { return v.data(); }
};

// Per-chunk fp64 partial sums of two per-channel quantities: each chunk of
// rows adds its fp32 block sums into its own row, and the rows are combined in
// chunk order, so the result does not depend on the thread count.
struct Partials {
  int P, Cp;
  std::vector<double> p1, p2;
  Partials(int parts, int cp)
      : P(parts), Cp(cp), p1(static_cast<std::size_t>(parts) * cp, 0.0), p2(p1.size(), 0.0) {}
  void add(int part, const std::vector<float>& a, const std::vector<float>& b, int C) {
    double* q1 = &p1[static_cast<std::size_t>(part) * Cp];
    double* q2 = &p2[static_cast<std::size_t>(part) * Cp];
    for (int c = 0; c < C; ++c) {
      q1[c] += a[c];
      q2[c] += b[c];
    }
  }
  void combine(std::vector<double>& s1, std::vector<double>& s2, int C) const {
    s1.assign(C, 0.0);
    s2.assign(C, 0.0);
    for (int part = 0; part < P; ++part)
      for (int c = 0; c < C; ++c) {
        s1[c] += p1[static_cast<std::size_t>(part) * Cp + c];
        s2[c] += p2[static_cast<std::size_t>(part) * Cp + c];
      }
  }
};

// The reduction order both statistics passes share: the M rows split into P
// fixed chunks (P does not depend on the thread count, so the bits do not
// either), each chunk in blocks of kRowBlock rows summed in fp32 by
// row(m, a, b), each block folded into the chunk's fp64 partials, the chunks
// combined in order into s1 and s2.
template <class Row>
void chunked_sums(const Geo& g, Row row, std::vector<double>& s1, std::vector<double>& s2) {
  const int C = g.C, Cp = g.Cp;
  const int P = static_cast<int>(g.M < kChunks ? g.M : kChunks);
  Partials parts(P, Cp);
#pragma omp parallel if (g.parallel())
  {
    std::vector<float> a(Cp), b(Cp);
#pragma omp for schedule(static)
    for (int part = 0; part < P; ++part) {
      const i64 m0 = g.M * part / P, m1 = g.M * (part + 1) / P;
      for (i64 mb = m0; mb < m1; mb += kRowBlock) {
        const i64 me = mb + kRowBlock < m1 ? mb + kRowBlock : m1;
        std::fill(a.begin(), a.end(), 0.0f);
        std::fill(b.begin(), b.end(), 0.0f);
        for (i64 m = mb; m < me; ++m) row(m, a.data(), b.data());
        parts.add(part, a, b, C);
      }
    }
  }
  parts.combine(s1, s2, C);
}

// Pass 1 of the forward: per-channel sums of (s - k) and (s - k)^2 over the
// src rows, where s is x's row or (POOL) the max of its 2x2 window, which is
// then stored with its argmax code.
template <int DT, bool POOL>
void forward_sums(const void* xv, void* pv, unsigned char* codes, const Geo& g, const float* k,
                  std::vector<double>& s1, std::vector<double>& s2) {
  typedef Io<DT> IO;
  typedef typename IO::T T;
  const T* x = static_cast<const T*>(xv);
  T* pooled = static_cast<T*>(pv);
  const int C = g.C;
  chunked_sums(g, [&](i64 m, float* a, float* b) {
    const T* r00 = x + m * C;
    const T *r01 = r00, *r10 = r00, *r11 = r00;
    if (POOL) {
      const i64 n = m / (static_cast<i64>(g.Ho) * g.Wo);
      const int rest = static_cast<int>(m - n * g.Ho * g.Wo);
      const int ho = rest / g.Wo, wo = rest - ho * g.Wo;
      r00 = x + ((n * g.H + 2 * ho) * g.W + 2 * wo) * C;
      r01 = r00 + C;
      r10 = r00 + static_cast<i64>(g.W) * C;
      r11 = r10 + C;
    }
    for (int c = 0; c < C; c += L) {
      const vm msk = tail_mask(C - c);
      vf s = IO::load(r00 + c, msk);
      if (POOL) {
        vi code = code_zero();
        vm t = takes_max(IO::load(r01 + c, msk), s);
        s = select(t, s, IO::load(r01 + c, msk));
        code = code_set(code, t, 1);
        t = takes_max(IO::load(r10 + c, msk), s);
        s = select(t, s, IO::load(r10 + c, msk));
        code = code_set(code, t, 2);
        t = takes_max(IO::load(r11 + c, msk), s);
        s = select(t, s, IO::load(r11 + c, msk));
        code = code_set(code, t, 3);
        IO::store(pooled + m * C + c, msk, s);
        code_store(codes + m * C + c, msk, code);
      }
      const vf d = sub(s, ld(k + c));
      st(a + c, add(ld(a + c), d));
      st(b + c, add(ld(b + c), mul(d, d)));
    }
  }, s1, s2);
}

// The forward's shift k[c]: the first src value of each channel (as
// bn_act_cpu.cpp: no cancellation in E[x^2] - E[x]^2 when |mean| >> std).
template <int DT>
void first_values(const void* xv, const Geo& g, float* k) {
  typedef typename Elem<DT>::T T;
  const T* x = static_cast<const T*>(xv);
  for (int c = 0; c < g.C; ++c) {
    float v = Elem<DT>::load(x[c]);
    if (g.pool) {
      const float w[3] = {Elem<DT>::load(x[g.C + c]),
                          Elem<DT>::load(x[static_cast<i64>(g.W) * g.C + c]),
                          Elem<DT>::load(x[static_cast<i64>(g.W + 1) * g.C + c])};
      for (float u : w)
        if (u > v || u != u) v = u;
    }
    k[c] = v;
  }
}

// Pass 2 of the forward: y = act((s - mean) * scale + bias) over src rows,
// the same bits either way. GELU (and ReLU) left to g++'s vectoriser (omp
// simd over the shared scalar math): 10-20% faster than the intrinsics of
// bn_act_vec.h on Zen 5 (GELU), 5-15% on Zen 4. SiLU through the intrinsics:
// g++'s loop took 1.4-1.8x their time on Zen 4 (batch 1536: 64 x 15 x 15
// 19.9 -> 12.7 ms, 256 x 7 x 7 19.1 -> 10.5 ms, the pooled 64 x 31 x 31 32.6
// -> 22.1 ms; not measured on Zen 5).
template <int DT, int ACT>
void forward_apply(const void* sv, void* yv, const float* st4, const Geo& g) {
  typedef Elem<DT> E;
  const typename E::T* s = static_cast<const typename E::T*>(sv);
  typename E::T* y = static_cast<typename E::T*>(yv);
  const int C = g.C;
  const float* mean = st4;
  const float* scale = st4 + 2 * C;
  const float* beta = st4 + 3 * C;
#if DBF_VEC
  if (ACT == kSilu) {  // bn_act_vec.h's intrinsics: g++ leaves SiLU's loop below slow
    typedef Io<DT> IO;
    const Padded pm(mean, C, g.Cp), ps(scale, C, g.Cp), pb(beta, C, g.Cp);
#pragma omp parallel for schedule(static) if (g.parallel())
    for (i64 m = 0; m < g.M; ++m)
      for (int c = 0; c < C; c += L) {
        const vm msk = tail_mask(C - c);
        const vf xc = sub(IO::load(s + m * C + c, msk), ld(pm.p() + c));
        IO::store(y + m * C + c, msk, act_forward<ACT>(add(mul(xc, ld(ps.p() + c)), ld(pb.p() + c))));
      }
    return;
  }
#endif
#pragma omp parallel for schedule(static) if (g.parallel())
  for (i64 m = 0; m < g.M; ++m) {
    const typename E::T* xr = s + m * C;
    typename E::T* yr = y + m * C;
#pragma omp simd
    for (int c = 0; c < C; ++c)
      yr[c] = E::store(dbf::act_forward(bn_z(E::load(xr[c]), mean[c], scale[c], beta[c]), ACT));
  }
}

// Pass 1 of the backward: sums of g = dy * act'(z) and of g * xhat; g itself
// is kept (fp32, so pass 2 gives the same bits) because act' costs more than
// writing and reading 4 bytes (measured: GELU's erf + 2 exp ~60 cycles per 16
// lanes on Zen 5, where a pass over memory has ~20 cycles per 16 elements).
template <int DT, int ACT>
void backward_sums(const void* sv, const void* dyv, const float* st4, const Geo& g, float* gout,
                   std::vector<double>& sg, std::vector<double>& sgx) {
  typedef Io<DT> IO;
  typedef typename IO::T T;
  const T* s = static_cast<const T*>(sv);
  const T* dy = static_cast<const T*>(dyv);
  const int C = g.C, Cp = g.Cp;
  const Padded mean(st4, C, Cp), invstd(st4 + C, C, Cp), scale(st4 + 2 * C, C, Cp),
      beta(st4 + 3 * C, C, Cp);
  chunked_sums(g, [&](i64 m, float* a, float* b) {
    for (int c = 0; c < C; c += L) {
      const vm msk = tail_mask(C - c);
      const vf xs = IO::load(s + m * C + c, msk);
      const vf xc = sub(xs, ld(mean.p() + c));
      const vf z = add(mul(xc, ld(scale.p() + c)), ld(beta.p() + c));
      const vf gg = mul(IO::load(dy + m * C + c, msk), act_grad<ACT>(z));
      Io<kF32>::store(gout + m * C + c, msk, gg);
      st(a + c, add(ld(a + c), gg));
      st(b + c, add(ld(b + c), mul(mul(gg, xc), ld(invstd.p() + c))));
    }
  }, sg, sgx);
}

// dx of one src row (C channels) into up to four destinations: dst[q] gets
// the value where the code is q (POOL), else dst[0] gets it all.
template <int DT, bool POOL>
inline void backward_row(const typename Io<DT>::T* s, const float* gin, const unsigned char* code,
                         typename Io<DT>::T* const* dst, const float* const* pc, int C) {
  typedef Io<DT> IO;
  for (int c = 0; c < C; c += L) {
    const vm msk = tail_mask(C - c);
    const vf xc = sub(IO::load(s + c, msk), ld(pc[0] + c));
    const vf sc = ld(pc[1] + c);
    const vf gg = Io<kF32>::load(gin + c, msk);
    const vf d = add(add(mul(sc, gg), mul(xc, ld(pc[3] + c))), ld(pc[4] + c));
    if (!POOL) {
      IO::store(dst[0] + c, msk, d);
      continue;
    }
    const vi q = code_load(code + c, msk);
    for (int j = 0; j < 4; ++j) IO::store(dst[j] + c, msk, keep_if_code(q, j, d));
  }
}

// Pass 2 of the backward: dx = scale * g + (s - mean) * cx + c1 (g from pass
// 1), with the pool
// written at the argmax position of each window and zeros elsewhere.
template <int DT, bool POOL>
void backward_apply(const void* sv, const float* gin, const unsigned char* codes, void* dxv,
                    const float* st4, const float* coef, const Geo& g) {
  typedef typename Io<DT>::T T;
  const T* s = static_cast<const T*>(sv);
  T* dx = static_cast<T*>(dxv);
  const int C = g.C, Cp = g.Cp;
  const Padded mean(st4, C, Cp), scale(st4 + 2 * C, C, Cp), beta(st4 + 3 * C, C, Cp),
      cx(coef, C, Cp), c1(coef + C, C, Cp);
  const float* pc[5] = {mean.p(), scale.p(), beta.p(), cx.p(), c1.p()};
  const i64 rows = static_cast<i64>(g.N) * g.Ho;  // src rows of Wo pixels
  const std::size_t pix = sizeof(T) * C;
  if (POOL && rows == 0) std::memset(dx, 0, pix * g.N * g.H * g.W);
#pragma omp parallel for schedule(static) if (g.parallel())
  for (i64 r = 0; r < rows; ++r) {
    const i64 n = r / g.Ho;
    const int ho = static_cast<int>(r - n * g.Ho);
    const i64 m0 = r * g.Wo;
    if (!POOL) {
      for (int wo = 0; wo < g.Wo; ++wo) {
        T* d0 = dx + (m0 + wo) * C;
        backward_row<DT, false>(s + (m0 + wo) * C, gin + (m0 + wo) * C, nullptr, &d0, pc, C);
      }
      continue;
    }
    T* row0 = dx + (n * g.H + 2 * ho) * g.W * C;
    T* row1 = row0 + static_cast<i64>(g.W) * C;
    for (int wo = 0; wo < g.Wo; ++wo) {
      T* d[4] = {row0 + 2 * wo * C, row0 + (2 * wo + 1) * C, row1 + 2 * wo * C,
                 row1 + (2 * wo + 1) * C};
      backward_row<DT, true>(s + (m0 + wo) * C, gin + (m0 + wo) * C, codes + (m0 + wo) * C, d,
                             pc, C);
    }
    if (g.W & 1) {  // the column no window covers
      std::memset(row0 + (g.W - 1) * C, 0, pix);
      std::memset(row1 + (g.W - 1) * C, 0, pix);
    }
    if (ho == g.Ho - 1 && g.H > 2 * g.Ho)  // the rows no window covers
      std::memset(row1 + static_cast<i64>(g.W) * C, 0, pix * g.W * (g.H - 2 * g.Ho));
  }
}

template <int DT, int ACT>
struct Fused {
  static void forward(const NhwcArgs& a) {
    const Geo g(a.N, a.H, a.W, a.C, a.pool);
    std::vector<double> s1, s2;
    Padded k(nullptr, g.C, g.Cp);
    const double t0 = omp_get_wtime();
    if (a.training && g.M > 0) {
      first_values<DT>(a.x, g, k.v.data());
      if (a.pool)
        forward_sums<DT, true>(a.x, a.pooled, a.codes, g, k.p(), s1, s2);
      else
        forward_sums<DT, false>(a.x, nullptr, nullptr, g, k.p(), s1, s2);
    } else if (a.pool) {  // eval: the pooled values and codes, no statistics
      forward_sums<DT, true>(a.x, a.pooled, a.codes, g, k.p(), s1, s2);
    }
    const i64 count = g.M;
    for (int c = 0; c < g.C; ++c) {
      const ChannelStats st = bn_channel_stats(
          a.training ? s1[c] : 0.0, a.training ? s2[c] : 0.0, k.v[c], count, a.weight[c],
          a.bias[c], a.eps, a.momentum, a.training != 0,
          a.running_mean ? a.running_mean + c : nullptr, a.running_var ? a.running_var + c : nullptr);
      a.stats[c] = st.mean;
      a.stats[g.C + c] = st.invstd;
      a.stats[2 * g.C + c] = st.scale;
      a.stats[3 * g.C + c] = st.bias;
    }
    const double t1 = omp_get_wtime();
    forward_apply<DT, ACT>(a.pool ? a.pooled : a.x, a.y, a.stats, g);
    g_pass_s[0] = t1 - t0;
    g_pass_s[1] = omp_get_wtime() - t1;
  }

  static void backward(const NhwcArgs& a) {
    const Geo g(a.N, a.H, a.W, a.C, a.pool);
    std::vector<double> sg(g.C, 0.0), sgx(g.C, 0.0);
    const void* src = a.pool ? a.pooled : a.x;
    // g between the passes, in a buffer kept across calls: a fresh 100 MB
    // allocation would cost its page faults on every call.
    static std::vector<float> gbuf;
    static std::mutex gbuf_mutex;
    std::lock_guard<std::mutex> lock(gbuf_mutex);
    if (gbuf.size() < static_cast<std::size_t>(g.M) * g.C) gbuf.resize(static_cast<std::size_t>(g.M) * g.C);
    const double t0 = omp_get_wtime();
    if (g.M > 0) backward_sums<DT, ACT>(src, a.dy, a.stats, g, gbuf.data(), sg, sgx);
    std::vector<float> coef(2 * static_cast<std::size_t>(g.C));
    for (int c = 0; c < g.C; ++c) {
      const ChannelGrad cg = bn_channel_grad(sg[c], sgx[c], g.M, a.stats[g.C + c],
                                             a.stats[2 * g.C + c], a.training != 0);
      coef[c] = cg.coef_x;
      coef[g.C + c] = cg.coef_1;
      a.dweight[c] = static_cast<float>(sgx[c]);
      a.dbias[c] = static_cast<float>(sg[c]);
    }
    const double t1 = omp_get_wtime();
    if (a.pool && !a.pooled_dx)
      backward_apply<DT, true>(src, gbuf.data(), a.codes, a.dx, a.stats, coef.data(), g);
    else  // no pool, or the pool's own gradient (one value a window: the rows of src)
      backward_apply<DT, false>(src, gbuf.data(), nullptr, a.dx, a.stats, coef.data(), g);
    g_pass_s[0] = t1 - t0;
    g_pass_s[1] = omp_get_wtime() - t1;
  }
};

template <int DT>
void run_act(const NhwcArgs& a, bool forward) {
  switch (a.act) {
    case kRelu: forward ? Fused<DT, kRelu>::forward(a) : Fused<DT, kRelu>::backward(a); return;
    case kGelu: forward ? Fused<DT, kGelu>::forward(a) : Fused<DT, kGelu>::backward(a); return;
    case kSilu: forward ? Fused<DT, kSilu>::forward(a) : Fused<DT, kSilu>::backward(a); return;
    default: forward ? Fused<DT, kIdentity>::forward(a) : Fused<DT, kIdentity>::backward(a); return;
  }
}

}  // namespace

bool nhwc_kernels_enabled() { return g_enabled; }
void set_nhwc_kernels_enabled(bool on) { g_enabled = on; }
bool nhwc_kernels_vectorised() { return DBF_VEC != 0; }
double nhwc_last_pass_seconds(int i) { return g_pass_s[i & 1]; }

void bn_act_nhwc(const NhwcArgs& a, bool forward) {
  if (a.dtype == kBF16)
    run_act<kBF16>(a, forward);
  else
    run_act<kF32>(a, forward);
}

}  // namespace cpu
DBF_NAMESPACE_END
