// Host launchers of the CUDA kernels, compiled by nvcc into the extension (never
// by NVRTC). Plain C types only, so bindings.cpp builds without CUDA headers.
// Each returns a cudaError_t value (0 = success); `stream` is a cudaStream_t.
#pragma once

extern "C" {

int dbf_cuda_device_count(int* count);
const char* dbf_cuda_error_string(int err);

// Workspaces from the caller: partial (P * C * 2 floats), shift_k (C floats).
int dbf_bn_act_forward_cuda(int dtype, const void* x, void* y, float* stats, const float* weight,
                            const float* bias, float* running_mean, float* running_var,
                            float* partial, float* shift_k, int P, int N, int C, int HW,
                            int channels_last, int training, float eps, float momentum, int act,
                            void* stream);

// Workspaces: partial (P * C * 2 floats), coef (2 * C floats).
int dbf_bn_act_backward_cuda(int dtype, const void* x, const void* dy, void* dx,
                             const float* stats, float* dweight, float* dbias, float* partial,
                             float* coef, int P, int N, int C, int HW, int channels_last,
                             int training, int act, void* stream);

// params: (B, 5) int32 rows [ox, oy, flip, cut_x, cut_y] (augment_math.cuh).
int dbf_augment_cuda(int dtype, const void* padded, const long long* indices, const int* params,
                     const float* scale, const float* shift, void* out, int B, int ph, int pw,
                     int C, int size, int cutout, void* stream);

// y = act(x + bias[c]); bias is C fp32 values.
int dbf_bias_act_forward_cuda(int dtype, const void* x, const float* bias, void* y, int N, int C,
                              int HW, int channels_last, int act, void* stream);

// dx = dy * act'(x + bias[c]); dbias (C fp32); workspace partial (P * C floats).
int dbf_bias_act_backward_cuda(int dtype, const void* x, const void* dy, const float* bias,
                               void* dx, float* dbias, float* partial, int P, int N, int C,
                               int HW, int channels_last, int act, void* stream);

int dbf_gemm_mma_cuda(int dtype, const void* A, const void* B, float* C, int M, int N, int K,
                      int lda, int ldb, int ldc, void* stream);

}

// Blocks of 256 threads for a grid-stride element-wise launch over `total`
// elements: enough to fill any current GPU (at most 8192), at least one.
inline unsigned int dbf_elementwise_blocks(long long total) {
  const long long b = (total + 255) / 256;
  return static_cast<unsigned int>(b < 8192 ? (b > 0 ? b : 1) : 8192);
}
