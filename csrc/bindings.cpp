// pybind11 module dawnbench_fast._C. Tensors cross as raw data pointers
// (Tensor.data_ptr()) plus shapes, so the module links against neither torch
// nor its C++ ABI: building it needs pybind11 alone, never a CUDA torch. The
// Python side (csrc/<op>.py) checks dtypes, layouts and devices before calling.
//
// Built with -DDBF_WITH_CUDA when nvcc was found: then the CUDA launchers of
// bn_act.cu / augment.cu / bias_act.cu / gemm_mma.cu are linked in (cudart static) and exposed as *_cuda.
//
// The CPU kernels are linked in once per target instruction set (csrc/build.py
// says which with -DDBF_HAVE_CPU_<NAME>): "baseline" (portable: x86-64 or the
// compiler's default elsewhere) and "avx512" (bn_act_vec.h's vector forms), or a
// single "march" copy when DAWNBENCH_MARCH asked for -march=<it>. This file is
// compiled for the baseline target, and calls the copy chosen at import: the
// best one this CPU runs, or the one DAWNBENCH_CPU_PATH names.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#ifdef DBF_HAVE_CPU_BASELINE
extern "C" const dbf::CpuApi* dbf_cpu_api_baseline();
#endif
#ifdef DBF_HAVE_CPU_AVX512
extern "C" const dbf::CpuApi* dbf_cpu_api_avx512();
#endif
#ifdef DBF_HAVE_CPU_MARCH
extern "C" const dbf::CpuApi* dbf_cpu_api_march();
#endif
#ifdef DBF_WITH_CUDA
#include "cuda_launchers.h"
#endif

namespace py = pybind11;

namespace {

template <typename T>
T* ptr(std::uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

// The AVX-512 copy is compiled with exactly these features (csrc/build.py's
// AVX512_FEATURES; tests/test_cpu_paths.py checks that the lists agree), so
// it runs where the CPU (and the OS, which libgcc's check includes) has them.
bool cpu_runs_avx512_copy() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
         __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

struct CpuCopy {
  const dbf::CpuApi* api;
  bool runs_here;
};

// The linked copies, best first.
std::vector<CpuCopy> cpu_copies() {
  std::vector<CpuCopy> copies;
#ifdef DBF_HAVE_CPU_MARCH
  // Built for the -march the user asked for: trusted to run here (the cpu
  // backend's probe compares its AVX-512 with /proc/cpuinfo, csrc/engine.py).
  copies.push_back({dbf_cpu_api_march(), true});
#endif
#ifdef DBF_HAVE_CPU_AVX512
  copies.push_back({dbf_cpu_api_avx512(), cpu_runs_avx512_copy()});
#endif
#ifdef DBF_HAVE_CPU_BASELINE
  copies.push_back({dbf_cpu_api_baseline(), true});
#endif
  if (copies.empty()) throw std::runtime_error("dawnbench_fast._C was built with no CPU copy");
  return copies;
}

const dbf::CpuApi* g_cpu = nullptr;  // the copy every CPU binding calls

// Switch to copy `name` ("" or "auto": the best one that runs here). Throws
// std::invalid_argument (Python ValueError) when it is not built or cannot
// run on this CPU. Not for use while kernels run on other threads.
void set_cpu_path(const std::string& name) {
  const dbf::CpuApi* chosen = nullptr;
  std::string built;
  for (const CpuCopy& c : cpu_copies()) {
    built += std::string(built.empty() ? "" : ", ") + c.api->name;
    if (name.empty() || name == "auto") {
      if (c.runs_here && chosen == nullptr) chosen = c.api;
    } else if (name == c.api->name) {
      if (!c.runs_here)
        throw std::invalid_argument("CPU path '" + name + "' cannot run on this CPU (it lacks "
                                    "AVX-512 F/CD/BW/DQ/VL, AVX2, FMA or BMI1/2)");
      chosen = c.api;
    }
  }
  if (chosen == nullptr)
    throw std::invalid_argument("CPU path '" + name + "' is not in this build (built: " + built +
                                "; or auto)");
  // The NHWC switch is per copy (a global in each copy of bn_act_pool_cpu.cpp):
  // carry it over so that a switch of copies changes nothing else.
  if (g_cpu != nullptr) chosen->set_nhwc_kernels_enabled(g_cpu->nhwc_kernels_enabled());
  g_cpu = chosen;
}

const dbf::CpuApi& cpu() { return *g_cpu; }

#ifdef DBF_WITH_CUDA
void check_cuda(int err, const char* what) {
  if (err != 0)
    throw std::runtime_error(std::string(what) + ": " + dbf_cuda_error_string(err));
}
#endif

}  // namespace

// The run-time build (native.py) gives the module another name, so that it
// can load beside a stale installed _C (Python caches extension modules).
#ifndef DBF_MODULE_NAME
#define DBF_MODULE_NAME _C
#endif

PYBIND11_MODULE(DBF_MODULE_NAME, m) {
  m.doc() = "dawnbench_fast's CUDA C++ kernels and their CPU (OpenMP) build";
#ifdef DBF_SOURCE_HASH
  m.attr("source_hash") = DBF_SOURCE_HASH;
#else
  m.attr("source_hash") = "";
#endif
#ifdef DBF_WITH_CUDA
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
#ifdef DBF_CPU_MARCH
  m.attr("cpu_march") = DBF_CPU_MARCH;  // the DAWNBENCH_MARCH of a "march" build
#else
  m.attr("cpu_march") = "";
#endif

  // The CPU path: DAWNBENCH_CPU_PATH when it names one that runs here (tests
  // force "baseline" with it), else the best one. A request that cannot be
  // met is not an import error: the best path serves, and cpu_path_note says
  // why (native.py turns it into a warning).
  std::string note;
  const char* want = std::getenv("DAWNBENCH_CPU_PATH");
  try {
    set_cpu_path(want ? want : "");
  } catch (const std::invalid_argument& e) {
    note = std::string("DAWNBENCH_CPU_PATH=") + want + " ignored: " + e.what();
    set_cpu_path("");
  }
  m.attr("cpu_path_note") = note;
  m.def("cpu_path", []() { return std::string(cpu().name); },
        "the CPU kernels' copy in use: 'avx512', 'baseline', or 'march' (one -march build)");
  m.def("cpu_paths", []() {
    std::vector<std::pair<std::string, bool>> out;
    for (const CpuCopy& c : cpu_copies()) out.emplace_back(c.api->name, c.runs_here);
    return out;
  }, "(name, runs on this CPU) of every linked copy, best first");
  m.def("set_cpu_path", &set_cpu_path, py::arg("name"),
        "use copy `name` ('auto': the best that runs here) from now on; ValueError if it is "
        "not built or cannot run here (tests compare the copies in one process)");

  m.def(
      "bn_act_forward",
      [](int dtype, std::uintptr_t x, std::uintptr_t y, std::uintptr_t stats, std::uintptr_t w,
         std::uintptr_t b, std::uintptr_t rm, std::uintptr_t rv, int N, int C, int HW, int cl,
         int training, float eps, float momentum, int act) {
        py::gil_scoped_release nogil;
        cpu().bn_act_forward(dtype, ptr<const void>(x), ptr<void>(y), ptr<float>(stats),
                                 ptr<const float>(w), ptr<const float>(b), ptr<float>(rm),
                                 ptr<float>(rv), N, C, HW, cl, training, eps, momentum, act);
      },
      "CPU BatchNorm + activation forward (pointers; see cpu_kernels.h)");
  m.def(
      "bn_act_backward",
      [](int dtype, std::uintptr_t x, std::uintptr_t dy, std::uintptr_t dx, std::uintptr_t stats,
         std::uintptr_t dw, std::uintptr_t db, int N, int C, int HW, int cl, int training,
         int act) {
        py::gil_scoped_release nogil;
        cpu().bn_act_backward(dtype, ptr<const void>(x), ptr<const void>(dy), ptr<void>(dx),
                                  ptr<const float>(stats), ptr<float>(dw), ptr<float>(db), N, C,
                                  HW, cl, training, act);
      },
      "CPU BatchNorm + activation backward (pointers; see cpu_kernels.h)");
  m.def(
      "pool_bn_act_forward",
      [](int dtype, std::uintptr_t x, std::uintptr_t pooled, std::uintptr_t codes,
         std::uintptr_t y, std::uintptr_t stats, std::uintptr_t w, std::uintptr_t b,
         std::uintptr_t rm, std::uintptr_t rv, int N, int H, int W, int C, int training,
         float eps, float momentum, int act) {
        py::gil_scoped_release nogil;
        dbf::NhwcArgs a{};
        a.dtype = dtype, a.act = act, a.N = N, a.H = H, a.W = W, a.C = C, a.pool = 1;
        a.training = training, a.x = ptr<const void>(x), a.pooled = ptr<void>(pooled);
        a.codes = ptr<unsigned char>(codes), a.y = ptr<void>(y), a.stats = ptr<float>(stats);
        a.weight = ptr<const float>(w), a.bias = ptr<const float>(b);
        a.running_mean = ptr<float>(rm), a.running_var = ptr<float>(rv), a.eps = eps;
        a.momentum = momentum;
        cpu().bn_act_nhwc(a, true);
      },
      "CPU 2x2 max-pool + BatchNorm + activation forward, NHWC fp32/bf16 (see cpu_kernels.h)");
  m.def(
      "pool_bn_act_backward",
      [](int dtype, std::uintptr_t pooled, std::uintptr_t codes, std::uintptr_t dy,
         std::uintptr_t dx, std::uintptr_t stats, std::uintptr_t dw, std::uintptr_t db, int N,
         int H, int W, int C, int training, int act, int pooled_dx) {
        py::gil_scoped_release nogil;
        dbf::NhwcArgs a{};
        a.dtype = dtype, a.act = act, a.N = N, a.H = H, a.W = W, a.C = C, a.pool = 1;
        a.pooled_dx = pooled_dx;
        a.training = training, a.pooled = ptr<void>(pooled);
        a.codes = ptr<unsigned char>(codes), a.dy = ptr<const void>(dy), a.dx = ptr<void>(dx);
        a.stats = ptr<float>(stats), a.dweight = ptr<float>(dw), a.dbias = ptr<float>(db);
        cpu().bn_act_nhwc(a, false);
      },
      "CPU backward of pool_bn_act_forward: dx is (N, H, W, C), or with pooled_dx the pool's "
      "own gradient (N, H/2, W/2, C)");
  m.def("set_nhwc_kernels_enabled", [](bool on) { cpu().set_nhwc_kernels_enabled(on); },
        "route bn_act_forward/backward's NHWC fp32/bf16 calls through the vectorised loops");
  m.def("nhwc_kernels_enabled", []() { return cpu().nhwc_kernels_enabled(); });
  m.def("nhwc_last_pass_seconds", [](int pass) { return cpu().nhwc_last_pass_seconds(pass); },
        "seconds of pass 0 (statistics/reduction) or 1 (apply) of the last NHWC call");
  m.def("nhwc_kernels_vectorised", []() { return cpu().nhwc_kernels_vectorised(); },
        "whether the NHWC loops of the CPU path in use were built with AVX-512");
  m.def(
      "augment",
      [](int dtype, std::uintptr_t padded, std::uintptr_t indices, std::uintptr_t params,
         std::uintptr_t scale, std::uintptr_t shift, std::uintptr_t out, int B, int ph, int pw,
         int C, int size, int cutout) {
        py::gil_scoped_release nogil;
        cpu().augment(dtype, ptr<const unsigned char>(padded), ptr<const long long>(indices),
                          ptr<const int>(params), ptr<const float>(scale),
                          ptr<const float>(shift), ptr<void>(out), B, ph, pw, C, size, cutout);
      },
      "CPU training augmentation (pointers; see cpu_kernels.h)");
  m.def(
      "bias_act_forward",
      [](int dtype, std::uintptr_t x, std::uintptr_t bias, std::uintptr_t y, int N, int C, int HW,
         int cl, int act) {
        py::gil_scoped_release nogil;
        cpu().bias_act_forward(dtype, ptr<const void>(x), ptr<const float>(bias), ptr<void>(y), N,
                               C, HW, cl, act);
      },
      "CPU bias + activation forward (pointers; see cpu_kernels.h)");
  m.def(
      "bias_act_backward",
      [](int dtype, std::uintptr_t x, std::uintptr_t dy, std::uintptr_t bias, std::uintptr_t dx,
         std::uintptr_t dbias, int N, int C, int HW, int cl, int act) {
        py::gil_scoped_release nogil;
        cpu().bias_act_backward(dtype, ptr<const void>(x), ptr<const void>(dy),
                                ptr<const float>(bias), ptr<void>(dx), ptr<float>(dbias), N, C, HW,
                                cl, act);
      },
      "CPU bias + activation backward: dx and the fp32 bias gradient (see cpu_kernels.h)");
  m.def("float_to_16bit", [](int dtype, std::uintptr_t src, std::uintptr_t dst, long long n) {
    py::gil_scoped_release nogil;
    cpu().float_to_16bit(dtype, ptr<const float>(src), ptr<unsigned short>(dst), n);
  });
  m.def("float_from_16bit", [](int dtype, std::uintptr_t src, std::uintptr_t dst, long long n) {
    py::gil_scoped_release nogil;
    cpu().float_from_16bit(dtype, ptr<const unsigned short>(src), ptr<float>(dst), n);
  });
  m.def("conv3x3_wgrad_supported", []() { return cpu().conv3x3_wgrad_supported(); },
        "Whether the copy in use has the AVX-512 BF16 conv weight gradient and this CPU runs it");
  m.def(
      "conv3x3_wgrad_bf16",
      [](std::uintptr_t x, std::uintptr_t dy, std::uintptr_t dw, std::uintptr_t xp,
         std::uintptr_t dyp, int N, int H, int W, int I, int O) {
        py::gil_scoped_release nogil;
        return cpu().conv3x3_wgrad_bf16(ptr<const uint16_t>(x), ptr<const uint16_t>(dy),
                                        ptr<float>(dw), ptr<uint32_t>(xp), ptr<uint32_t>(dyp), N,
                                        H, W, I, O);
      },
      "3x3 conv weight gradient, bf16 NHWC in, fp32 (3, 3, I, O) out (see cpu_kernels.h)");
  m.def(
      "conv3x3_wgrad_pooled",
      [](std::uintptr_t x, std::uintptr_t dy, std::uintptr_t codes, std::uintptr_t dw, int N,
         int H, int W, int I, int O) {
        py::gil_scoped_release nogil;
        return cpu().conv3x3_wgrad_pooled(ptr<const uint16_t>(x), ptr<const uint16_t>(dy),
                                          ptr<const uint8_t>(codes), ptr<float>(dw), N, H, W, I, O);
      },
      "3x3 conv weight gradient before a 2x2 max-pool: bf16 NHWC in (dY full-size, or with codes "
      "(not 0) the pool's own gradient), fp32 (O, 3, 3, I) out; 2 where dY is not a max-pool's "
      "gradient (see cpu_kernels.h)");
  m.def("conv3x3_wgrad_amx_supported", []() { return cpu().conv3x3_wgrad_amx_supported(); },
        "Whether the copy in use has the AMX conv weight gradient and this CPU and OS give AMX tiles");
  m.def(
      "conv3x3_wgrad_amx",
      [](std::uintptr_t x, std::uintptr_t dy, std::uintptr_t dw, int N, int H, int W, int I,
         int O) {
        py::gil_scoped_release nogil;
        return cpu().conv3x3_wgrad_amx(ptr<const uint16_t>(x), ptr<const uint16_t>(dy),
                                       ptr<float>(dw), N, H, W, I, O);
      },
      "3x3 conv weight gradient on AMX tiles, bf16 NHWC in, fp32 (O, 3, 3, I) out (see "
      "cpu_kernels.h)");
  m.def(
      "conv3x3_dgrad_pooled",
      [](std::uintptr_t dy, std::uintptr_t codes, std::uintptr_t w, std::uintptr_t dx, int N,
         int H, int W, int I, int O, bool pairs) {
        py::gil_scoped_release nogil;
        return cpu().conv3x3_dgrad_pooled(ptr<const uint16_t>(dy), ptr<const uint8_t>(codes),
                                          ptr<const uint16_t>(w), ptr<uint16_t>(dx), N, H, W, I, O,
                                          pairs ? 1 : 0);
      },
      "3x3 conv data gradient before a 2x2 max-pool: dY bf16 NHWC (full-size, or with codes (not "
      "0) the pool's own gradient) and w (O, I, 3, 3) bf16 in, dx bf16 NHWC out; pairs: vdpbf16ps "
      "where the CPU has it, else fp32 FMAs; 2 where dY is not a max-pool's gradient (see "
      "cpu_kernels.h)");
  m.def(
      "gemm_mma_emulated",
      [](int dtype, std::uintptr_t A, std::uintptr_t B, std::uintptr_t C, int M, int N, int K,
         int lda, int ldb, int ldc) {
        py::gil_scoped_release nogil;
        return cpu().gemm_mma_emulated(dtype, ptr<const void>(A), ptr<const void>(B),
                                           ptr<float>(C), M, N, K, lda, ldb, ldc);
      },
      "The tensor-core GEMM's tiles on the CPU with mma emulated (tests only)");

#ifdef DBF_WITH_CUDA
  m.def("cuda_device_count", []() {
    int n = 0;
    const int err = dbf_cuda_device_count(&n);
    if (err != 0) throw std::runtime_error(dbf_cuda_error_string(err));
    return n;
  });
  m.def("bn_act_forward_cuda",
        [](int dtype, std::uintptr_t x, std::uintptr_t y, std::uintptr_t stats, std::uintptr_t w,
           std::uintptr_t b, std::uintptr_t rm, std::uintptr_t rv, std::uintptr_t partial,
           std::uintptr_t shift_k, int P, int N, int C, int HW, int cl, int training, float eps,
           float momentum, int act, std::uintptr_t stream) {
          check_cuda(dbf_bn_act_forward_cuda(
                         dtype, ptr<const void>(x), ptr<void>(y), ptr<float>(stats),
                         ptr<const float>(w), ptr<const float>(b), ptr<float>(rm), ptr<float>(rv),
                         ptr<float>(partial), ptr<float>(shift_k), P, N, C, HW, cl, training, eps,
                         momentum, act, ptr<void>(stream)),
                     "bn_act_forward_cuda");
        });
  m.def("bn_act_backward_cuda",
        [](int dtype, std::uintptr_t x, std::uintptr_t dy, std::uintptr_t dx, std::uintptr_t stats,
           std::uintptr_t dw, std::uintptr_t db, std::uintptr_t partial, std::uintptr_t coef,
           int P, int N, int C, int HW, int cl, int training, int act, std::uintptr_t stream) {
          check_cuda(dbf_bn_act_backward_cuda(dtype, ptr<const void>(x), ptr<const void>(dy),
                                              ptr<void>(dx), ptr<const float>(stats),
                                              ptr<float>(dw), ptr<float>(db), ptr<float>(partial),
                                              ptr<float>(coef), P, N, C, HW, cl, training, act,
                                              ptr<void>(stream)),
                     "bn_act_backward_cuda");
        });
  m.def("augment_cuda",
        [](int dtype, std::uintptr_t padded, std::uintptr_t indices, std::uintptr_t params,
           std::uintptr_t scale, std::uintptr_t shift, std::uintptr_t out, int B, int ph, int pw,
           int C, int size, int cutout, std::uintptr_t stream) {
          check_cuda(dbf_augment_cuda(dtype, ptr<const void>(padded),
                                      ptr<const long long>(indices), ptr<const int>(params),
                                      ptr<const float>(scale), ptr<const float>(shift),
                                      ptr<void>(out), B, ph, pw, C, size, cutout,
                                      ptr<void>(stream)),
                     "augment_cuda");
        });
  m.def("bias_act_forward_cuda",
        [](int dtype, std::uintptr_t x, std::uintptr_t bias, std::uintptr_t y, int N, int C,
           int HW, int cl, int act, std::uintptr_t stream) {
          check_cuda(dbf_bias_act_forward_cuda(dtype, ptr<const void>(x), ptr<const float>(bias),
                                               ptr<void>(y), N, C, HW, cl, act, ptr<void>(stream)),
                     "bias_act_forward_cuda");
        });
  m.def("bias_act_backward_cuda",
        [](int dtype, std::uintptr_t x, std::uintptr_t dy, std::uintptr_t bias, std::uintptr_t dx,
           std::uintptr_t dbias, std::uintptr_t partial, int P, int N, int C, int HW, int cl,
           int act, std::uintptr_t stream) {
          check_cuda(dbf_bias_act_backward_cuda(dtype, ptr<const void>(x), ptr<const void>(dy),
                                                ptr<const float>(bias), ptr<void>(dx),
                                                ptr<float>(dbias), ptr<float>(partial), P, N, C,
                                                HW, cl, act, ptr<void>(stream)),
                     "bias_act_backward_cuda");
        });
  m.def("gemm_mma_cuda", [](int dtype, std::uintptr_t A, std::uintptr_t B, std::uintptr_t C,
                            int M, int N, int K, int lda, int ldb, int ldc,
                            std::uintptr_t stream) {
    check_cuda(dbf_gemm_mma_cuda(dtype, ptr<const void>(A), ptr<const void>(B), ptr<float>(C), M,
                                 N, K, lda, ldb, ldc, ptr<void>(stream)),
               "gemm_mma_cuda");
  });
#endif
}
