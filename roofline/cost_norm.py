"""Normalisation layers, forward and backward.

Batch norm in training, per element: statistics (sum and sum of squares: 3
FLOPs) then normalise and affine ((x - mean) * invstd * w + b: 4 FLOPs), so 7
FLOPs; in eval 4 (stats are given). Backward: two reductions (sum of dy,
sum of dy * xhat: 4 FLOPs) and the input gradient (5 FLOPs). Minimal bytes
follow the tool's definition (each input read once, each output written once)
although a real kernel reads x (and dy) twice, once for the statistics and
once to normalise, unless the tensor stays in cache: that second pass is what
measured bytes, or a fused kernel, show. Per-channel vectors are counted too.
Layer and group norm follow the same pattern over their normalised groups.
"""

from __future__ import annotations

from dawnbench_fast.roofline.cost_table import CostTable
from dawnbench_fast.roofline.trace_args import is_tensor, itemsize, numel, tensor_bytes

COSTS = CostTable()  # registered by roofline.registry


def _vec_bytes(shapes: list, dtypes: list, first: int) -> int:
    return sum(
        tensor_bytes(s, d)
        for s, d in zip(shapes[first:], dtypes[first:], strict=False)
        if is_tensor(d) and len(s) == 1
    )


def _training_flag(conc: list, idx: int) -> bool:
    return not (idx < len(conc) and conc[idx] == "False")


def bn_forward(shapes: list, dtypes: list, training: bool) -> tuple[float, float] | None:
    if not shapes or not shapes[0] or not is_tensor(dtypes[0]):
        return None
    x, dt = shapes[0], dtypes[0]
    n = numel(x)
    xb = tensor_bytes(x, dt)
    vecs = _vec_bytes(shapes, dtypes, 1)
    if training:
        # read x, write y; read and update the running stats
        return 7.0 * n, 2.0 * xb + 2 * vecs
    return 4.0 * n, 2.0 * xb + vecs


@COSTS.cost("aten::batch_norm", "aten::_batch_norm_impl_index")
def batch_norm(shapes: list, dtypes: list, conc: list) -> tuple[float, float] | None:
    # (input, weight, bias, running_mean, running_var, training, momentum, eps, ...)
    return bn_forward(shapes, dtypes, _training_flag(conc, 5))


@COSTS.cost("aten::native_batch_norm", "aten::cudnn_batch_norm", "aten::miopen_batch_norm",
      "aten::_native_batch_norm_legit")
def native_batch_norm(shapes: list, dtypes: list, conc: list) -> tuple[float, float] | None:
    return bn_forward(shapes, dtypes, _training_flag(conc, 5))


@COSTS.cost("aten::_batch_norm_with_update", "aten::_batch_norm_with_update_functional")
def bn_with_update(shapes: list, dtypes: list) -> tuple[float, float] | None:
    return bn_forward(shapes, dtypes, True)


@COSTS.cost("aten::_native_batch_norm_legit_no_training", "aten::_batch_norm_no_update")
def bn_no_update(shapes: list, dtypes: list) -> tuple[float, float] | None:
    return bn_forward(shapes, dtypes, False)


@COSTS.cost("aten::native_batch_norm_backward", "aten::cudnn_batch_norm_backward",
      "aten::miopen_batch_norm_backward", "aten::batch_norm_backward")
def batch_norm_backward(shapes: list, dtypes: list, conc: list) -> tuple[float, float] | None:
    # (grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
    #  train, eps, output_mask)
    if len(shapes) < 2 or not shapes[0] or not is_tensor(dtypes[0]):
        return None
    gy, x = shapes[0], shapes[1]
    n = numel(gy)
    rb = tensor_bytes(gy, dtypes[0]) + tensor_bytes(x, dtypes[1])
    vecs = _vec_bytes(shapes, dtypes, 2)
    # read dy and x, write dx
    return 9.0 * n, rb + n * itemsize(dtypes[1]) + vecs


@COSTS.cost("aten::layer_norm", "aten::native_layer_norm", "aten::group_norm",
      "aten::native_group_norm", "aten::rms_norm", "aten::_fused_rms_norm",
      "aten::instance_norm")
def layer_norm(shapes: list, dtypes: list) -> tuple[float, float] | None:
    if not shapes or not shapes[0] or not is_tensor(dtypes[0]):
        return None
    x, dt = shapes[0], dtypes[0]
    return 7.0 * numel(x), 2.0 * tensor_bytes(x, dt) + _vec_bytes(shapes, dtypes, 1)


@COSTS.cost("aten::native_layer_norm_backward", "aten::native_group_norm_backward",
      "aten::_fused_rms_norm_backward")
def layer_norm_backward(shapes: list, dtypes: list) -> tuple[float, float] | None:
    if len(shapes) < 2 or not shapes[0] or not is_tensor(dtypes[0]):
        return None
    gy, x = shapes[0], shapes[1]
    n = numel(gy)
    rb = tensor_bytes(gy, dtypes[0]) + tensor_bytes(x, dtypes[1])
    return 9.0 * n, rb + n * itemsize(dtypes[1]) + _vec_bytes(shapes, dtypes, 2)
