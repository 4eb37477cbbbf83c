// CPU (OpenMP) loop around augment_math.cuh (and the 16-bit conversions): one image per iteration, each
// output row written contiguously; the output dtype is a template parameter.
#include "augment_math.cuh"
#include "cpu_kernels.h"
#include "float16_bits.cuh"

namespace dbf {
namespace cpu {
namespace {

template <int DT>
void augment_t(const unsigned char* padded, const long long* indices, const int* params,
               const float* scale, const float* shift, void* outv, int B, int ph, int pw, int C,
               int size, int cutout) {
  typedef typename Elem<DT>::T T;
  T* out = static_cast<T*>(outv);
#pragma omp parallel for schedule(static)
  for (int b = 0; b < B; ++b) {
    const int* p = params + b * kAugFields;
    const int ox = p[kAugOx], oy = p[kAugOy], flip = p[kAugFlip];
    T* ob = out + static_cast<i64>(b) * size * size * C;
    for (int y = 0; y < size; ++y) {
      const unsigned char* src_row =
          padded + augment_src_offset(indices[b], oy + y, 0, 0, ph, pw, C);
      T* orow = ob + static_cast<i64>(y) * size * C;
      const bool cut_row = cutout > 0 && y >= p[kAugCutY] && y < p[kAugCutY] + cutout;
      for (int x = 0; x < size; ++x) {
        const unsigned char* s = src_row + static_cast<i64>(augment_src_col(x, ox, flip, size)) * C;
        T* o = orow + static_cast<i64>(x) * C;
        if (cut_row && augment_in_cutout(y, x, p[kAugCutY], p[kAugCutX], cutout)) {
          for (int c = 0; c < C; ++c) o[c] = Elem<DT>::store(0.0f);
        } else {
          for (int c = 0; c < C; ++c) o[c] = Elem<DT>::store(augment_value(s[c], scale[c], shift[c]));
        }
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
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < n; ++i)
    dst[i] = dtype == kBF16 ? float_to_bf16(src[i]) : float_to_f16(src[i]);
}

void float_from_16bit(int dtype, const unsigned short* src, float* dst, long long n) {
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < n; ++i)
    dst[i] = dtype == kBF16 ? bf16_to_float(src[i]) : f16_to_float(src[i]);
}

}  // namespace cpu
}  // namespace dbf
