// Training augmentation on the GPU: one thread per output element of the
// NHWC (channels_last) batch; consecutive threads write consecutive
// channels/pixels, so stores are coalesced. Math: augment_math.cuh.
#include "augment_math.cuh"
#include "float16_bits.cuh"

namespace dbf {

template <int DT, typename I>
__device__ __forceinline__ void augment_loop(const unsigned char* __restrict__ padded,
                                             const long long* __restrict__ indices,
                                             const int* __restrict__ params,
                                             const float* __restrict__ scale,
                                             const float* __restrict__ shift,
                                             typename Elem<DT>::T* out, I total, int ph, int pw,
                                             int C, int size, int cutout) {
  const I cc = static_cast<I>(C), sz = static_cast<I>(size);
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % cc);
    I r = i / cc;
    const int x = static_cast<int>(r % sz);
    r /= sz;
    const int y = static_cast<int>(r % sz);
    const int b = static_cast<int>(r / sz);
    const int* p = params + b * kAugFields;
    float v = 0.0f;
    if (!augment_in_cutout(y, x, p[kAugCutY], p[kAugCutX], cutout)) {
      const int sx = augment_src_col(x, p[kAugOx], p[kAugFlip], size);
      const unsigned char u =
          padded[augment_src_offset(indices[b], p[kAugOy] + y, sx, c, ph, pw, C)];
      v = augment_value(u, scale[c], shift[c]);
    }
    out[i] = Elem<DT>::store(v);
  }
}

// padded: (num_images, ph, pw, C) uint8; indices: (B,) int64; params: (B, 5)
// int32 [ox, oy, flip, cut_x, cut_y]; out: (B, size, size, C) of dtype DT
// (fp32 is bit-identical to the reference; bf16/fp16 round that fp32 value).
// 32-bit index arithmetic below 2^31 elements (grid-stride steps stay < 2^21).
template <int DT>
__device__ __forceinline__ void augment_elems(const unsigned char* __restrict__ padded,
                                              const long long* __restrict__ indices,
                                              const int* __restrict__ params,
                                              const float* __restrict__ scale,
                                              const float* __restrict__ shift,
                                              typename Elem<DT>::T* out, int B, int ph, int pw,
                                              int C, int size, int cutout) {
  const long long total = static_cast<long long>(B) * size * size * C;
  if (total < 2147483647LL)
    augment_loop<DT, unsigned int>(padded, indices, params, scale, shift, out,
                                   static_cast<unsigned int>(total), ph, pw, C, size, cutout);
  else
    augment_loop<DT, long long>(padded, indices, params, scale, shift, out, total, ph, pw, C,
                                size, cutout);
}

}  // namespace dbf

#define DBF_AUGMENT_KERNEL(SUFFIX, DT)                                                          \
  extern "C" __global__ void augment_crop_flip_##SUFFIX(                                        \
      const unsigned char* padded, const long long* indices, const int* params,                 \
      const float* scale, const float* shift, dbf::Elem<DT>::T* out, int B, int ph, int pw,     \
      int C, int size, int cutout) {                                                            \
    dbf::augment_elems<DT>(padded, indices, params, scale, shift, out, B, ph, pw, C, size,     \
                           cutout);                                                             \
  }

DBF_AUGMENT_KERNEL(f32, dbf::kF32)
DBF_AUGMENT_KERNEL(bf16, dbf::kBF16)
DBF_AUGMENT_KERNEL(f16, dbf::kF16)

#if !defined(__CUDACC_RTC__)
#include "cuda_launchers.h"

extern "C" int dbf_augment_cuda(int dtype, const void* padded, const long long* indices,
                                const int* params, const float* scale, const float* shift,
                                void* out, int B, int ph, int pw, int C, int size, int cutout,
                                void* stream) {
  const long long total = static_cast<long long>(B) * size * size * C;
  long long blocks = (total + 255) / 256;
  blocks = blocks < 1 ? 1 : (blocks > 8192 ? 8192 : blocks);
  const unsigned int g = static_cast<unsigned int>(blocks);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const unsigned char* src = static_cast<const unsigned char*>(padded);
  typedef unsigned short h;
  if (dtype == dbf::kBF16)
    augment_crop_flip_bf16<<<g, 256, 0, s>>>(src, indices, params, scale, shift,
                                             static_cast<h*>(out), B, ph, pw, C, size, cutout);
  else if (dtype == dbf::kF16)
    augment_crop_flip_f16<<<g, 256, 0, s>>>(src, indices, params, scale, shift,
                                            static_cast<h*>(out), B, ph, pw, C, size, cutout);
  else
    augment_crop_flip_f32<<<g, 256, 0, s>>>(src, indices, params, scale, shift,
                                            static_cast<float*>(out), B, ph, pw, C, size, cutout);
  return static_cast<int>(cudaGetLastError());
}
#endif  // !__CUDACC_RTC__
