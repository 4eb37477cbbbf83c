// The CPU loops' dtype x activation switch, resolved once per call outside
// the loops: F<dtype, act>::run(args...) for the kernels that are templates
// on both (bn_act_cpu.cpp, bias_act_cpu.cpp).
#pragma once
#include "dbf_common.cuh"

DBF_NAMESPACE_BEGIN

template <template <int, int> class F, typename... Args>
void dispatch_dt_act(int dtype, int act, Args... args) {
#define DBF_ACTS(DT)                                     \
  switch (act) {                                         \
    case kRelu: F<DT, kRelu>::run(args...); return;      \
    case kGelu: F<DT, kGelu>::run(args...); return;      \
    case kSilu: F<DT, kSilu>::run(args...); return;      \
    default: F<DT, kIdentity>::run(args...); return;     \
  }
  switch (dtype) {
    case kBF16: DBF_ACTS(kBF16)
    case kF16: DBF_ACTS(kF16)
    default: DBF_ACTS(kF32)
  }
#undef DBF_ACTS
}

DBF_NAMESPACE_END
