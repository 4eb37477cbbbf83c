// Shared definitions for code that builds three ways: nvcc (the extension),
// NVRTC (CuPy's RawModule at run time) and a plain C++ compiler (the CPU/OpenMP
// build). NVRTC has no standard headers, so nothing here includes one; the
// 16-bit float types are plain bit patterns converted by hand.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define DBF_DEVICE_COMPILE 1
#define DBF_HD __host__ __device__ __forceinline__
#else
// Forced inline: the CPU build's loops vectorise only if the math is inlined.
#define DBF_HD inline __attribute__((always_inline))
#endif

// The CPU kernels are compiled once per target instruction set (csrc/build.py:
// a portable baseline and an AVX-512 copy, the one to call chosen at run time
// by bindings.cpp), each copy with -DDBF_CPU_ISA=<name>. Every function of
// the shared headers and CPU sources then lives in namespace dbf::<name>
// (inline, so the code still says dbf::...): without it the two copies'
// inline functions would share mangled names, the linker would keep one of
// each for both copies, and AVX-512 code could run on a CPU without it.
// nvcc, NVRTC and bindings.cpp define no DBF_CPU_ISA: plain namespace dbf.
#ifdef DBF_CPU_ISA
#define DBF_NAMESPACE_BEGIN namespace dbf { inline namespace DBF_CPU_ISA {
#define DBF_NAMESPACE_END } }
#else
#define DBF_NAMESPACE_BEGIN namespace dbf {
#define DBF_NAMESPACE_END }
#endif

// Unroll on the GPU; host compilers (g++ -Werror, nvcc's host pass) know no
// `#pragma unroll`, and unroll loops of a constant trip count by themselves.
#if defined(__CUDA_ARCH__)
#define DBF_UNROLL _Pragma("unroll")
#else
#define DBF_UNROLL
#endif

// Types and enums only (no code): shared by every copy as they are.
namespace dbf {

typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;

// Element types, matched by value in every binding and in ops.py (DTYPE_CODES).
enum DType { kF32 = 0, kBF16 = 1, kF16 = 2 };
// Activations, matched by value in dawnbench_fast/vocabulary.py (Activation.code);
// tests/test_vocabulary.py checks that the two agree.
enum Act { kIdentity = 0, kRelu = 1, kGelu = 2, kSilu = 3 };

}  // namespace dbf
