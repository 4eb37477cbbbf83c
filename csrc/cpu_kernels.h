// The CPU (OpenMP) build of csrc's shared math: its entry points, and the
// table through which bindings.cpp calls them. Tensors travel as raw pointers
// plus shapes; dtype codes and activation codes are dbf::DType / dbf::Act
// (dbf_common.cuh).
//
// The CPU sources are compiled once per target instruction set (csrc/build.py),
// each copy in its own namespace dbf::<DBF_CPU_ISA> (dbf_common.cuh), and each
// copy's cpu_api.cpp fills a CpuApi table with its functions. bindings.cpp,
// compiled once for the baseline target, picks the table of the best copy this
// CPU runs (or the one DAWNBENCH_CPU_PATH forces) when the module loads.
#pragma once

#include <cstdint>

#include "dbf_common.cuh"

namespace dbf {

// Arguments of bn_act_nhwc (below): plain data, the same type in every copy.
struct NhwcArgs;

}  // namespace dbf

DBF_NAMESPACE_BEGIN
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

// BatchNorm + activation on NHWC tensors of fp32 or bf16, optionally fused
// with the 2x2 max-pool before it (bn_act_pool_cpu.cpp). Forward: x is
// (N, H, W, C); with pool, pooled and codes (N, H/2, W/2, C) are written
// (codes: argmax 0..3 of each window, row-major) and y is pooled-sized.
// Backward: dy is y-sized; dx is x-sized (zeros where no window's max was),
// or with pooled_dx the pool's own gradient (y-sized: the value each window's
// max gets; the codes say where it goes).
// Forward also fills stats (4*C) and updates running stats as bn_act_forward.
void bn_act_nhwc(const NhwcArgs& args, bool forward);
// bn_act_forward/backward route NHWC fp32/bf16 through bn_act_nhwc while this
// is on (off by default: not measurably faster there); tests and benchmarks
// switch it on to compare.
bool nhwc_kernels_enabled();
void set_nhwc_kernels_enabled(bool on);
bool nhwc_kernels_vectorised();  // built with AVX-512 (else one lane at a time)
double nhwc_last_pass_seconds(int pass);  // the last bn_act_nhwc call's pass 0 / 1

// Training augmentation (augment_math.cuh): out is (B, size, size, C) of dtype.
void augment(int dtype, const unsigned char* padded, const long long* indices, const int* params,
             const float* scale, const float* shift, void* out, int B, int ph, int pw, int C,
             int size, int cutout);

// y = act(x + bias[c]) (bias_act_math.cuh): x and y (N, C, H, W) of dtype, NCHW
// or (channels_last) NHWC memory; bias C fp32 values.
void bias_act_forward(int dtype, const void* x, const float* bias, void* y, int N, int C, int HW,
                      int channels_last, int act);
// dx = dy * act'(x + bias[c]) in x's dtype and layout; dbias (C fp32) = its sum per channel.
void bias_act_backward(int dtype, const void* x, const void* dy, const float* bias, void* dx,
                       float* dbias, int N, int C, int HW, int channels_last, int act);

// C (fp32) = A @ B for fp16/bf16 A, B: the tensor-core kernel's tiles run on
// the CPU with the mma instruction emulated (a check of the tile logic, not a
// fast path). Returns how many block stages took the 16-byte staging path.
int gemm_mma_emulated(int dtype, const void* A, const void* B, float* C, int M, int N, int K,
                      int lda, int ldb, int ldc);

// Weight gradient of a 3x3 / stride 1 / padding 1 conv (conv_group_wgrad_cpu.cpp):
// x (N, H, W, I) and dy (N, H, W, O) bf16 NHWC; dw (3, 3, I, O) fp32;
// xp and dyp workspaces of ceil(N/2)*H*W*I and *O uint32. Returns 0, or 1
// where this copy or CPU has no AVX-512 BF16 or O is not a multiple of 16.
bool conv3x3_wgrad_supported();
int conv3x3_wgrad_bf16(const uint16_t* x, const uint16_t* dy, float* dw, uint32_t* xp,
                       uint32_t* dyp, int N, int H, int W, int I, int O);

// The same weight gradient with Intel AMX tiles (conv_group_wgrad_amx_cpu.cpp):
// x (N, H, W, I) and dy (N, H, W, O) bf16 NHWC, dw (O, 3, 3, I) fp32.
// Returns 0, or 1 where this copy has no AVX-512, the CPU or the OS gives no
// AMX tiles, or a 32-bit gather index would overflow. Workspaces are the
// kernel's own (kept across calls); calls are serialised.
bool conv3x3_wgrad_amx_supported();
int conv3x3_wgrad_amx(const uint16_t* x, const uint16_t* dy, float* dw, int N, int H, int W, int I,
                      int O);

// The same weight gradient where the conv's output feeds a 2x2 / stride-2
// max-pool, so dy holds at most one nonzero per pool window and channel
// (conv_group_wgrad_pooled_cpu.cpp): only those are summed, in fp32. dw (O, 3, 3, I)
// fp32. codes null: dy is the full-size gradient (N, H, W, O); else dy is the
// pool's own gradient (N, H/2, W/2, O) and codes (same shape, uint8) the
// forward's argmax 0..3 of each window (pool_bn_act's, bn_act_pool_cpu.cpp),
// the same bits without the full-size tensor. Returns 0; 1 where this copy
// has no AVX-512 or O is not a multiple of 16 or the map is under 2x2; 2
// where a full-size dy is not such a gradient (a window with two nonzeros
// in a channel, or a nonzero outside every window): dw is then undefined and
// the caller runs the dense kernel.
int conv3x3_wgrad_pooled(const uint16_t* x, const uint16_t* dy, const uint8_t* codes, float* dw,
                         int N, int H, int W, int I, int O);

// The data gradient of the same conv before a 2x2 / stride-2 max-pool
// (conv_group_dgrad_pooled_cpu.cpp): each nonzero of dy (N, H, W, O) bf16 NHWC
// times its weight rows of w (O, I, 3, 3) bf16, summed in fp32 and rounded
// once into dx (N, H, W, I) bf16 NHWC. pairs (not 0): two nonzeros to a
// vdpbf16ps where this copy and CPU have AVX-512 BF16; else (or pairs 0) one
// fp32 FMA a product, in both copies (the baseline one a lane at a time, the
// same bits). dy and codes as for the weight gradient above. Returns 0; 1
// where N, I or O is under 1 or the map under 2x2; 2 where a full-size dy
// is not a max-pool's gradient (as above): dx is then undefined and the
// caller runs the dense data gradient.
int conv3x3_dgrad_pooled(const uint16_t* dy, const uint8_t* codes, const uint16_t* w, uint16_t* dx,
                         int N, int H, int W, int I, int O, int pairs);

// fp32 <-> bf16/fp16 with the shared conversions of float16_bits.cuh (tests
// compare them with torch's rounding).
void float_to_16bit(int dtype, const float* src, unsigned short* dst, long long n);
void float_from_16bit(int dtype, const unsigned short* src, float* dst, long long n);

}  // namespace cpu
DBF_NAMESPACE_END

namespace dbf {

struct NhwcArgs {
  int dtype, act, N, H, W, C, pool, training;
  int pooled_dx;          // backward with pool: dx y-sized, not scattered (see bn_act_nhwc)
  const void* x;          // forward input; backward: the BN input when !pool
  void* pooled;           // pool: written by forward, read by backward
  unsigned char* codes;   // pool: idem
  void* y;                // forward output
  const void* dy;         // backward
  void* dx;               // backward output
  float* stats;           // 4*C: mean | invstd | scale | bias
  const float* weight;
  const float* bias;
  float* running_mean;
  float* running_var;
  float eps, momentum;
  float* dweight;
  float* dbias;
};

// One compiled copy's entry points (the declarations above, as pointers).
struct CpuApi {
  const char* name;  // the copy's DBF_CPU_ISA: "baseline", "avx512", or "march"
  decltype(&cpu::bn_act_forward) bn_act_forward;
  decltype(&cpu::bn_act_backward) bn_act_backward;
  decltype(&cpu::bn_act_nhwc) bn_act_nhwc;
  decltype(&cpu::nhwc_kernels_enabled) nhwc_kernels_enabled;
  decltype(&cpu::set_nhwc_kernels_enabled) set_nhwc_kernels_enabled;
  decltype(&cpu::nhwc_kernels_vectorised) nhwc_kernels_vectorised;
  decltype(&cpu::nhwc_last_pass_seconds) nhwc_last_pass_seconds;
  decltype(&cpu::augment) augment;
  decltype(&cpu::gemm_mma_emulated) gemm_mma_emulated;
  decltype(&cpu::float_to_16bit) float_to_16bit;
  decltype(&cpu::float_from_16bit) float_from_16bit;
  decltype(&cpu::conv3x3_wgrad_supported) conv3x3_wgrad_supported;
  decltype(&cpu::conv3x3_wgrad_bf16) conv3x3_wgrad_bf16;
  decltype(&cpu::conv3x3_wgrad_pooled) conv3x3_wgrad_pooled;
  decltype(&cpu::conv3x3_wgrad_amx_supported) conv3x3_wgrad_amx_supported;
  decltype(&cpu::conv3x3_wgrad_amx) conv3x3_wgrad_amx;
  decltype(&cpu::conv3x3_dgrad_pooled) conv3x3_dgrad_pooled;
  decltype(&cpu::bias_act_forward) bias_act_forward;
  decltype(&cpu::bias_act_backward) bias_act_backward;
};

}  // namespace dbf

// The table of copy ISA: a C name per copy (dbf_cpu_api_baseline, ...), so
// bindings.cpp can declare the getters of several copies side by side.
#define DBF_CAT2(a, b) a##b
#define DBF_CAT(a, b) DBF_CAT2(a, b)
#define DBF_CPU_API_GETTER(isa) DBF_CAT(dbf_cpu_api_, isa)
