// This copy's entry points as a CpuApi table (cpu_kernels.h). Compiled once
// per target instruction set with the other CPU sources; bindings.cpp reads
// the table of the copy it chose through dbf_cpu_api_<DBF_CPU_ISA>().
#include "cpu_kernels.h"

#ifndef DBF_CPU_ISA
#error "cpu_api.cpp is compiled once per CPU copy, with -DDBF_CPU_ISA=<name> (csrc/build.py)"
#endif
#define DBF_STR2(x) #x
#define DBF_STR(x) DBF_STR2(x)

extern "C" const dbf::CpuApi* DBF_CPU_API_GETTER(DBF_CPU_ISA)() {
  namespace c = dbf::cpu;  // this copy's (dbf::DBF_CPU_ISA::cpu)
  static const dbf::CpuApi api = {
      DBF_STR(DBF_CPU_ISA),    c::bn_act_forward,         c::bn_act_backward,
      c::bn_act_nhwc,          c::nhwc_kernels_enabled,   c::set_nhwc_kernels_enabled,
      c::nhwc_kernels_vectorised, c::nhwc_last_pass_seconds, c::augment,
      c::gemm_mma_emulated,    c::float_to_16bit,         c::float_from_16bit,
      c::conv3x3_wgrad_supported, c::conv3x3_wgrad_bf16, c::conv3x3_wgrad_pooled,
      c::conv3x3_wgrad_amx_supported, c::conv3x3_wgrad_amx,
      c::conv3x3_dgrad_pooled,
      c::bias_act_forward,     c::bias_act_backward,
  };
  return &api;
}
