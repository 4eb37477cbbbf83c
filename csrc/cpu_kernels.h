// The CPU (OpenMP) build of csrc's shared math: declarations used by
// bindings.cpp. Tensors travel as raw pointers plus shapes; dtype codes and
// activation codes are dbf::DType / dbf::Act (dbf_common.cuh).
#pragma once

namespace dbf {
namespace cpu {

// BatchNorm + activation forward. stats (out, 4*C floats) = mean | invstd |
// scale | bias, kept for the backward. Training mode updates running_mean /
// running_var in place (when not null); eval mode reads them.
void bn_act_forward(int dtype, const void* x, void* y, float* stats, const float* weight,
                    const float* bias, float* running_mean, float* running_var, int N, int C,
                    int HW, int channels_last, int training, float eps, float momentum, int act);

// Backward: dx (same dtype/layout as x), dweight and dbias (C floats each).
void bn_act_backward(int dtype, const void* x, const void* dy, void* dx, const float* stats,
                     float* dweight, float* dbias, int N, int C, int HW, int channels_last,
                     int training, int act);

// Training augmentation (augment_math.cuh): out is (B, size, size, C) of dtype.
void augment(int dtype, const unsigned char* padded, const long long* indices, const int* params,
             const float* scale, const float* shift, void* out, int B, int ph, int pw, int C,
             int size, int cutout);

// C (fp32) = A @ B for fp16/bf16 A, B: the tensor-core kernel's tiles run on
// the CPU with the mma instruction emulated (a check of the tile logic, not a
// fast path). Returns how many block stages took the 16-byte staging path.
int gemm_mma_emulated(int dtype, const void* A, const void* B, float* C, int M, int N, int K,
                      int lda, int ldb, int ldc);

// fp32 <-> bf16/fp16 with the shared conversions of float16_bits.cuh (tests
// compare them with torch's rounding).
void float_to_16bit(int dtype, const float* src, unsigned short* dst, long long n);
void float_from_16bit(int dtype, const unsigned short* src, float* dst, long long n);

}  // namespace cpu
}  // namespace dbf
