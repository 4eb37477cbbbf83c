// AVX-512 forms of bn_act_math.cuh's per-element math for the CPU build.
//
// Why by hand: g++ 12 with -march=native does not vectorise the bf16 loads,
// the bf16 rounding store and the erf/exp of the shared header across
// channels well enough (measured 1.2-3.7 GB/s for the old loops against a
// copy bandwidth of 17-56 GB/s on the 2-core Zen 5). Each function below does
// exactly the operations of its scalar counterpart, in the same order and
// without fused multiply-adds (-ffp-contract=off also holds for intrinsics in
// g++), so a lane gives the bit pattern the scalar code gives: the fused
// kernels stay bit-identical to the unfused ones (tests/ops check it).
//
// DBF_VEC is 1 when AVX-512 F+BW+VL are enabled (the build's AVX-512 copy,
// csrc/build.py); the kernels then use these, else (the baseline copy) they
// use the scalar shared math one element at a time.
#pragma once
#include "bn_act_math.cuh"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define DBF_VEC 1
// g++ 12 warns of "uninitialised" values inside its own intrinsic headers
// (their `__Y = __Y` placeholders) once they are inlined into OpenMP regions:
// a known false positive, not ours to fix.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

DBF_NAMESPACE_BEGIN
namespace vec {

constexpr int L = 16;  // fp32 lanes
typedef __m512 vf;
typedef __mmask16 vm;

inline vm tail_mask(int n) { return n >= L ? static_cast<vm>(0xffff) : static_cast<vm>((1u << n) - 1u); }
inline vf splat(float v) { return _mm512_set1_ps(v); }
inline vf add(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf neg(vf a) {  // -a, exact (a sign flip, as the scalar unary minus)
  return _mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
}

// Storage <-> fp32. BF16 rounds to nearest even, NaN to a quiet NaN, exactly
// float_to_bf16 (not VCVTNEPS2BF16, which treats denormal inputs as zero).
template <int DT> struct Io;
template <> struct Io<kF32> {
  typedef float T;
  static vf load(const T* p, vm m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(T* p, vm m, vf v) { _mm512_mask_storeu_ps(p, m, v); }
};
template <> struct Io<kBF16> {
  typedef u16 T;
  static vf load(const T* p, vm m) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static void store(T* p, vm m, vf v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    const vm is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                              _mm512_set1_epi32(0x7f800000));
    const __m512i r = _mm512_mask_blend_epi32(is_nan, rounded, nan);
    _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(r));
  }
};

// Per-channel parameters and accumulators live in arrays padded to L lanes.
inline vf ld(const float* p) { return _mm512_loadu_ps(p); }
inline void st(float* p, vf v) { _mm512_storeu_ps(p, v); }

// Max-pool: lanes where v replaces the running max (v > max, or v is NaN), as
// ATen's CPU max-pool decides, so ties keep the first position in scan order.
typedef __m512i vi;
inline vm takes_max(vf v, vf mx) {
  return _mm512_cmp_ps_mask(v, mx, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
}
inline vf select(vm m, vf if_false, vf if_true) { return _mm512_mask_blend_ps(m, if_false, if_true); }
inline vi code_zero() { return _mm512_setzero_si512(); }
inline vi code_set(vi c, vm m, int q) { return _mm512_mask_mov_epi32(c, m, _mm512_set1_epi32(q)); }
inline void code_store(unsigned char* p, vm m, vi c) { _mm512_mask_cvtepi32_storeu_epi8(p, m, c); }
inline vi code_load(const unsigned char* p, vm m) {
  return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p));
}
inline vf keep_if_code(vi c, int q, vf v) {  // v where code == q, else +0
  return _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(c, _mm512_set1_epi32(q)), v);
}

// host_exp, lane by lane.
inline vf exp(vf x) {
  x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, splat(-87.0f), _CMP_LT_OQ), x, splat(-87.0f));
  x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, splat(88.0f), _CMP_GT_OQ), x, splat(88.0f));
  const vf t = mul(x, splat(1.44269504088896341f));
  const vf n = _mm512_roundscale_ps(add(t, splat(0.5f)), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const vf f = sub(x, mul(n, splat(0.693147180559945309f)));
  vf p = splat(1.0f / 720.0f);
  p = add(mul(p, f), splat(1.0f / 120.0f));
  p = add(mul(p, f), splat(1.0f / 24.0f));
  p = add(mul(p, f), splat(1.0f / 6.0f));
  p = add(mul(p, f), splat(0.5f));
  p = add(mul(p, f), splat(1.0f));
  p = add(mul(p, f), splat(1.0f));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
  return mul(p, _mm512_castsi512_ps(e));
}

// host_erf, lane by lane.
inline vf erf(vf x) {
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const vf ax = _mm512_castsi512_ps(_mm512_andnot_si512(sign_bit, _mm512_castps_si512(x)));
  const vf t = div(splat(1.0f), add(splat(1.0f), mul(splat(0.3275911f), ax)));
  vf p = splat(1.061405429f);
  p = sub(mul(p, t), splat(1.453152027f));
  p = add(mul(p, t), splat(1.421413741f));
  p = sub(mul(p, t), splat(0.284496736f));
  p = add(mul(p, t), splat(0.254829592f));
  const vf neg_ax = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(ax), sign_bit));
  const vf r = sub(splat(1.0f), mul(mul(p, t), exp(mul(neg_ax, ax))));
  const __m512i mag = _mm512_andnot_si512(sign_bit, _mm512_castps_si512(r));
  return _mm512_castsi512_ps(_mm512_or_si512(mag, _mm512_and_si512(sign_bit, _mm512_castps_si512(x))));
}

template <int ACT>
inline vf act_forward(vf z) {
  if (ACT == kRelu) return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(z, splat(0.0f), _CMP_GT_OQ), z);
  if (ACT == kGelu)
    return mul(mul(splat(0.5f), z), add(splat(1.0f), erf(mul(z, splat(0.70710678118654752f)))));
  if (ACT == kSilu) return div(z, add(splat(1.0f), exp(neg(z))));
  return z;
}

template <int ACT>
inline vf act_grad(vf z) {
  if (ACT == kRelu)
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(z, splat(0.0f), _CMP_GT_OQ), splat(1.0f));
  if (ACT == kGelu) {
    const vf cdf = mul(splat(0.5f), add(splat(1.0f), erf(mul(z, splat(0.70710678118654752f)))));
    const vf pdf = mul(splat(0.39894228040143268f), exp(mul(mul(splat(-0.5f), z), z)));
    return add(cdf, mul(z, pdf));
  }
  if (ACT == kSilu) {
    const vf s = div(splat(1.0f), add(splat(1.0f), exp(neg(z))));
    return mul(s, add(splat(1.0f), mul(z, sub(splat(1.0f), s))));
  }
  return splat(1.0f);
}

}  // namespace vec
DBF_NAMESPACE_END
#else
#define DBF_VEC 0

DBF_NAMESPACE_BEGIN
namespace vec {

// One lane: the same kernels run on the shared scalar math.
constexpr int L = 1;
typedef float vf;
typedef bool vm;
typedef int vi;

inline vm tail_mask(int) { return true; }
inline vf splat(float v) { return v; }
inline vf add(vf a, vf b) { return a + b; }
inline vf sub(vf a, vf b) { return a - b; }
inline vf mul(vf a, vf b) { return a * b; }
inline vf div(vf a, vf b) { return a / b; }
inline vf ld(const float* p) { return *p; }
inline void st(float* p, vf v) { *p = v; }
template <int DT> struct Io {
  typedef typename Elem<DT>::T T;
  static vf load(const T* p, vm) { return Elem<DT>::load(*p); }
  static void store(T* p, vm, vf v) { *p = Elem<DT>::store(v); }
};
inline vm takes_max(vf v, vf mx) { return v > mx || v != v; }
inline vf select(vm m, vf if_false, vf if_true) { return m ? if_true : if_false; }
inline vi code_zero() { return 0; }
inline vi code_set(vi c, vm m, int q) { return m ? q : c; }
inline void code_store(unsigned char* p, vm, vi c) { *p = static_cast<unsigned char>(c); }
inline vi code_load(const unsigned char* p, vm) { return *p; }
inline vf keep_if_code(vi c, int q, vf v) { return c == q ? v : 0.0f; }
template <int ACT> inline vf act_forward(vf z) { return dbf::act_forward(z, ACT); }
template <int ACT> inline vf act_grad(vf z) { return dbf::act_grad(z, ACT); }

}  // namespace vec
DBF_NAMESPACE_END
#endif
