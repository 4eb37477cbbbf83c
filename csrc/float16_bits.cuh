// bf16 / fp16 <-> fp32 conversions on raw 16-bit patterns, identical on host and
// device (round to nearest even, NaN kept NaN, fp16 subnormals handled), so the
// CPU build rounds exactly as the GPU kernels do.
#pragma once
#include "dbf_common.cuh"

DBF_NAMESPACE_BEGIN

DBF_HD float bits_to_float(u32 u) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("mov.b32 %0, %1;" : "=f"(f) : "r"(u));
  return f;
#else
  return __builtin_bit_cast(float, u);  // vectorises (a memcpy here does not)
#endif
}

DBF_HD u32 float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  u32 u;
  asm("mov.b32 %0, %1;" : "=r"(u) : "f"(f));
  return u;
#else
  return __builtin_bit_cast(u32, f);
#endif
}

DBF_HD float bf16_to_float(u16 h) { return bits_to_float(static_cast<u32>(h) << 16); }

DBF_HD u16 float_to_bf16(float f) {
#if defined(__CUDA_ARCH__)
  u16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  // Branch-free so that CPU loops over it vectorise.
  const u32 u = float_to_bits(f);
  const u32 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // nearest, ties to even
  const u32 nan = (u >> 16) | 0x40u;                              // quiet NaN
  return static_cast<u16>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
#endif
}

DBF_HD float f16_to_float(u16 h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  const u32 sign = static_cast<u32>(h & 0x8000u) << 16;
  const u32 exp = (h >> 10) & 0x1fu;
  const u32 man = h & 0x3ffu;
  if (exp == 0x1fu) return bits_to_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp != 0) return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
  // zero or subnormal: man * 2^-24, exact in fp32
  const float mag = static_cast<float>(man) * 5.9604644775390625e-8f;
  return sign ? -mag : mag;
#endif
}

DBF_HD u16 float_to_f16(float f) {
#if defined(__CUDA_ARCH__)
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  const u32 u = float_to_bits(f);
  const u16 sign = static_cast<u16>((u >> 16) & 0x8000u);
  const u32 a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<u16>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<u16>(sign | 0x7c00u);  // rounds to inf
  if (a < 0x38800000u) {
    // Result is subnormal (or zero) in fp16: scale to units of 2^-24 and round
    // to nearest even by hand (adding a float would round with the FPU mode).
    if (a < 0x33000000u) return sign;  // below half of the smallest subnormal
    const u32 e = a >> 23;           // 102..112
    const u32 m = (a & 0x7fffffu) | 0x800000u;
    const u32 shift = 126u - e;       // 14..24: m * 2^(e-150) / 2^-24 = m >> (126-e)
    u32 r = m >> shift;
    const u32 rem = m & ((1u << shift) - 1u);
    const u32 half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<u16>(sign | r);
  }
  // normal: rebias exponent (127 -> 15) and round the 13 dropped bits
  u32 r = a - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<u16>(sign | (r >> 13));
#endif
}

// Typed load/store used by every kernel: T is float or u16 with a DType tag.
template <int DT> struct Elem;
template <> struct Elem<kF32> {
  typedef float T;
  static DBF_HD float load(T v) { return v; }
  static DBF_HD T store(float v) { return v; }
};
template <> struct Elem<kBF16> {
  typedef u16 T;
  static DBF_HD float load(T v) { return bf16_to_float(v); }
  static DBF_HD T store(float v) { return float_to_bf16(v); }
};
template <> struct Elem<kF16> {
  typedef u16 T;
  static DBF_HD float load(T v) { return f16_to_float(v); }
  static DBF_HD T store(float v) { return float_to_f16(v); }
};

DBF_NAMESPACE_END
