// pybind11 module dawnbench_fast._C. Tensors cross as raw data pointers
// (Tensor.data_ptr()) plus shapes, so the module links against neither torch
// nor its C++ ABI: building it needs pybind11 alone, never a CUDA torch. The
// Python side (csrc/ops.py) checks dtypes, layouts and devices before calling.
//
// Built with -DDBF_WITH_CUDA when nvcc was found: then the CUDA launchers of
// bn_act.cu / gemm_mma.cu are linked in (cudart static) and exposed as *_cuda.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cpu_kernels.h"
#ifdef DBF_WITH_CUDA
#include "cuda_launchers.h"
#endif

namespace py = pybind11;

namespace {

template <typename T>
T* ptr(std::uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

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

  m.def(
      "bn_act_forward",
      [](int dtype, std::uintptr_t x, std::uintptr_t y, std::uintptr_t stats, std::uintptr_t w,
         std::uintptr_t b, std::uintptr_t rm, std::uintptr_t rv, int N, int C, int HW, int cl,
         int training, float eps, float momentum, int act) {
        py::gil_scoped_release nogil;
        dbf::cpu::bn_act_forward(dtype, ptr<const void>(x), ptr<void>(y), ptr<float>(stats),
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
        dbf::cpu::bn_act_backward(dtype, ptr<const void>(x), ptr<const void>(dy), ptr<void>(dx),
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
        dbf::cpu::NhwcArgs a{};
        a.dtype = dtype, a.act = act, a.N = N, a.H = H, a.W = W, a.C = C, a.pool = 1;
        a.training = training, a.x = ptr<const void>(x), a.pooled = ptr<void>(pooled);
        a.codes = ptr<unsigned char>(codes), a.y = ptr<void>(y), a.stats = ptr<float>(stats);
        a.weight = ptr<const float>(w), a.bias = ptr<const float>(b);
        a.running_mean = ptr<float>(rm), a.running_var = ptr<float>(rv), a.eps = eps;
        a.momentum = momentum;
        dbf::cpu::bn_act_nhwc(a, true);
      },
      "CPU 2x2 max-pool + BatchNorm + activation forward, NHWC fp32/bf16 (see cpu_kernels.h)");
  m.def(
      "pool_bn_act_backward",
      [](int dtype, std::uintptr_t pooled, std::uintptr_t codes, std::uintptr_t dy,
         std::uintptr_t dx, std::uintptr_t stats, std::uintptr_t dw, std::uintptr_t db, int N,
         int H, int W, int C, int training, int act) {
        py::gil_scoped_release nogil;
        dbf::cpu::NhwcArgs a{};
        a.dtype = dtype, a.act = act, a.N = N, a.H = H, a.W = W, a.C = C, a.pool = 1;
        a.training = training, a.pooled = ptr<void>(pooled);
        a.codes = ptr<unsigned char>(codes), a.dy = ptr<const void>(dy), a.dx = ptr<void>(dx);
        a.stats = ptr<float>(stats), a.dweight = ptr<float>(dw), a.dbias = ptr<float>(db);
        dbf::cpu::bn_act_nhwc(a, false);
      },
      "CPU backward of pool_bn_act_forward: dx is (N, H, W, C)");
  m.def("set_nhwc_kernels_enabled", &dbf::cpu::set_nhwc_kernels_enabled,
        "route bn_act_forward/backward's NHWC fp32/bf16 calls through the vectorised loops");
  m.def("nhwc_kernels_enabled", &dbf::cpu::nhwc_kernels_enabled);
  m.def("nhwc_last_pass_seconds", &dbf::cpu::nhwc_last_pass_seconds,
        "seconds of pass 0 (statistics/reduction) or 1 (apply) of the last NHWC call");
  m.def("nhwc_kernels_vectorised", &dbf::cpu::nhwc_kernels_vectorised,
        "whether the NHWC loops were built with AVX-512");
  m.def(
      "augment",
      [](int dtype, std::uintptr_t padded, std::uintptr_t indices, std::uintptr_t params,
         std::uintptr_t scale, std::uintptr_t shift, std::uintptr_t out, int B, int ph, int pw,
         int C, int size, int cutout) {
        py::gil_scoped_release nogil;
        dbf::cpu::augment(dtype, ptr<const unsigned char>(padded), ptr<const long long>(indices),
                          ptr<const int>(params), ptr<const float>(scale),
                          ptr<const float>(shift), ptr<void>(out), B, ph, pw, C, size, cutout);
      },
      "CPU training augmentation (pointers; see cpu_kernels.h)");
  m.def("float_to_16bit", [](int dtype, std::uintptr_t src, std::uintptr_t dst, long long n) {
    py::gil_scoped_release nogil;
    dbf::cpu::float_to_16bit(dtype, ptr<const float>(src), ptr<unsigned short>(dst), n);
  });
  m.def("float_from_16bit", [](int dtype, std::uintptr_t src, std::uintptr_t dst, long long n) {
    py::gil_scoped_release nogil;
    dbf::cpu::float_from_16bit(dtype, ptr<const unsigned short>(src), ptr<float>(dst), n);
  });
  m.def(
      "gemm_mma_emulated",
      [](int dtype, std::uintptr_t A, std::uintptr_t B, std::uintptr_t C, int M, int N, int K,
         int lda, int ldb, int ldc) {
        py::gil_scoped_release nogil;
        return dbf::cpu::gemm_mma_emulated(dtype, ptr<const void>(A), ptr<const void>(B),
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
  m.def("gemm_mma_cuda", [](int dtype, std::uintptr_t A, std::uintptr_t B, std::uintptr_t C,
                            int M, int N, int K, int lda, int ldb, int ldc,
                            std::uintptr_t stream) {
    check_cuda(dbf_gemm_mma_cuda(dtype, ptr<const void>(A), ptr<const void>(B), ptr<float>(C), M,
                                 N, K, lda, ldb, ldc, ptr<void>(stream)),
               "gemm_mma_cuda");
  });
#endif
}
