// CPU (OpenMP) loop around augment_math.cuh (and the 16-bit conversions).
#include <vector>

#include "augment_math.cuh"
#include "cpu_kernels.h"
#include "float16_bits.cuh"

DBF_NAMESPACE_BEGIN
namespace cpu {
namespace {

// Rows are handled as flat runs of size*C values: a plain row is a contiguous
// copy of the source run (vectorises); a flipped row reads it through a
// precomputed index table. Per-value scale/shift tables repeat the channels.
template <int DT>
void augment_t(const unsigned char* padded, const long long* indices, const int* params,
               const float* scale, const float* shift, void* outv, int B, int ph, int pw, int C,
               int size, int cutout) {
  typedef typename Elem<DT>::T T;
  T* out = static_cast<T*>(outv);
  const int run = size * C;
  std::vector<float> sc(run), sh(run);
  std::vector<int> flip_src(run);
  for (int x = 0; x < size; ++x)
    for (int c = 0; c < C; ++c) {
      sc[x * C + c] = scale[c];
      sh[x * C + c] = shift[c];
      flip_src[x * C + c] = augment_src_col(x, 0, 1, size) * C + c;
    }
  const float* psc = sc.data();
  const float* psh = sh.data();
  const int* pflip = flip_src.data();
#pragma omp parallel for schedule(static) if (B >= 16)
  for (int b = 0; b < B; ++b) {
    const int* p = params + b * kAugFields;
    const int ox = p[kAugOx], oy = p[kAugOy], flip = p[kAugFlip];
    T* ob = out + static_cast<i64>(b) * size * run;
    for (int y = 0; y < size; ++y) {
      // first source pixel of this output row (column ox of the padded image)
      const unsigned char* s = padded + augment_src_offset(indices[b], oy + y, ox, 0, ph, pw, C);
      T* o = ob + static_cast<i64>(y) * run;
      if (flip) {
#pragma omp simd
        for (int j = 0; j < run; ++j) o[j] = Elem<DT>::store(augment_value(s[pflip[j]], psc[j], psh[j]));
      } else {
#pragma omp simd
        for (int j = 0; j < run; ++j) o[j] = Elem<DT>::store(augment_value(s[j], psc[j], psh[j]));
      }
      if (cutout > 0 && y >= p[kAugCutY] && y < p[kAugCutY] + cutout) {
        for (int x = 0; x < size; ++x)
          if (augment_in_cutout(y, x, p[kAugCutY], p[kAugCutX], cutout))
            for (int c = 0; c < C; ++c) o[x * C + c] = Elem<DT>::store(0.0f);
      }
    }
  }
}

}  // namespace

void augment(int dtype, const unsigned char* padded, const long long* indices, const int* params,
             const float* scale, const float* shift, void* out, int B, int ph, int pw, int C,
             int size, int cutout) {
  if (dtype == kBF16)
    augment_t<kBF16>(padded, indices, params, scale, shift, out, B, ph, pw, C, size, cutout);
  else if (dtype == kF16)
    augment_t<kF16>(padded, indices, params, scale, shift, out, B, ph, pw, C, size, cutout);
  else
    augment_t<kF32>(padded, indices, params, scale, shift, out, B, ph, pw, C, size, cutout);
}

void float_to_16bit(int dtype, const float* src, unsigned short* dst, long long n) {
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (long long i = 0; i < n; ++i)
    dst[i] = dtype == kBF16 ? float_to_bf16(src[i]) : float_to_f16(src[i]);
}

void float_from_16bit(int dtype, const unsigned short* src, float* dst, long long n) {
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (long long i = 0; i < n; ++i)
    dst[i] = dtype == kBF16 ? bf16_to_float(src[i]) : f16_to_float(src[i]);
}

}  // namespace cpu
DBF_NAMESPACE_END
