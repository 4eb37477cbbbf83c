// Per-element math of the `bias_act` op (reference: dawnbench_fast/layer_ops.py
// bias_act): y = act(x + bias[c]) in fp32, and its backward g = dy * act'(x +
// bias[c]), which is both dx and the summand of dbias[c]. The activation and
// its derivative are bn_act_math.cuh's (act_forward / act_grad, the same
// functions the bn_act kernels use: exact erf GELU, SiLU, ReLU, identity,
// switched on the codes of dawnbench_fast/vocabulary.py). The loops live in
// bias_act.cu (GPU) and bias_act_cpu.cpp (OpenMP); both call only these.
//
// Layouts: an (N, C, H, W) tensor is walked as a row-major [R, K] matrix:
// NCHW is (N*C) x (H*W) with channel row % C; channels_last (NHWC) is
// (N*H*W) x C with channel = column.
#pragma once
#include "bn_act_math.cuh"

DBF_NAMESPACE_BEGIN

DBF_HD float bias_act_value(float x, float bias, int act) { return act_forward(x + bias, act); }

DBF_HD float bias_act_grad(float x, float bias, float dy, int act) {
  return dy * act_grad(x + bias, act);
}

// Channel of element `i` of the flat tensor: `inner` is 1 for channels_last
// and H*W for NCHW (I: the index type, 32-bit where the tensor allows it).
template <typename I>
DBF_HD int bias_act_channel(I i, I C, I inner) {
  return static_cast<int>((i / inner) % C);
}

// Offset of (row m = n*H*W + s, channel c) in the flat tensor: NHWC m*C + c,
// NCHW (n*C + c)*HW + s.
template <typename I>
DBF_HD I bias_act_offset(I m, I c, I C, I HW, int cl) {
  if (cl) return m * C + c;
  const I n = m / HW;
  return (n * C + c) * HW + (m - n * HW);
}

// Position of (channel c, spatial s) within one image's C*HW values.
DBF_HD i64 bias_act_row_pos(int c, int s, int C, int HW, int cl) {
  return cl ? static_cast<i64>(s) * C + c : static_cast<i64>(c) * HW + s;
}

DBF_NAMESPACE_END
