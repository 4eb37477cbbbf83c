"""Reductions, softmax, losses and pooling, forward and backward.

Output sizes that the trace does not record are derived from the recorded
kernel/stride lists (pooling) or from the reduced dims (reductions).
"""

from __future__ import annotations

from dawnbench_fast.roofline.cost_conv import conv_out_spatial
from dawnbench_fast.roofline.cost_table import CostTable
from dawnbench_fast.roofline.trace_args import (
    is_tensor,
    itemsize,
    numel,
    parse_list,
    tensor_args,
    tensor_bytes,
)

COSTS = CostTable()  # registered by roofline.registry


def _reduced_numel(shape: list, dims: list | None, keep_all: bool = False) -> int:
    if keep_all:
        return numel(shape)
    if dims is None or dims == []:
        return 1
    nd = len(shape)
    dims = {d % nd for d in dims} if nd else set()
    return numel([s for i, s in enumerate(shape) if i not in dims])


@COSTS.cost("aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::max", "aten::min",
      "aten::argmax", "aten::argmin", "aten::prod", "aten::norm", "aten::linalg_vector_norm",
      "aten::var", "aten::std", "aten::var_mean", "aten::std_mean", "aten::all", "aten::any",
      "aten::logsumexp", "aten::count_nonzero", "aten::nansum")
def reduction(shapes: list, dtypes: list, conc: list) -> tuple[float, float] | None:
    if not shapes or not is_tensor(dtypes[0]):
        return None
    if len(shapes) > 1 and is_tensor(dtypes[1]) and shapes[1] == shapes[0]:
        # binary max/min (element-wise maximum)
        n = numel(shapes[0])
        return float(n), 3.0 * tensor_bytes(shapes[0], dtypes[0])
    x, dt = shapes[0], dtypes[0]
    dims = None
    for c in conc[1:3]:
        lst = parse_list(c)
        if lst is not None:
            dims = lst
            break
        if c.lstrip("-").isdigit():
            dims = [int(c)]
            break
    n_out = _reduced_numel(list(x), dims)
    n = numel(x)
    return float(n), float(tensor_bytes(x, dt) + n_out * itemsize(dt))


@COSTS.cost("aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax",
      "aten::_safe_softmax")
def softmax(shapes: list, dtypes: list) -> tuple[float, float] | None:
    # max, subtract, exp, sum, divide (or log and subtract): 5 FLOPs / element
    if not shapes or not is_tensor(dtypes[0]):
        return None
    n = numel(shapes[0])
    return 5.0 * n, 2.0 * tensor_bytes(shapes[0], dtypes[0])


@COSTS.cost("aten::_softmax_backward_data", "aten::_log_softmax_backward_data")
def softmax_backward(shapes: list, dtypes: list) -> tuple[float, float] | None:
    # sum of (grad * y) per row, then grad - y * sum (or exp): 4 FLOPs / element
    if len(shapes) < 2 or not is_tensor(dtypes[0]):
        return None
    n = numel(shapes[0])
    return 4.0 * n, float(tensor_bytes(shapes[0], dtypes[0]) * 3)


@COSTS.cost("aten::nll_loss", "aten::nll_loss_forward", "aten::nll_loss_nd", "aten::nll_loss2d",
      "aten::nll_loss2d_forward")
def nll_loss(shapes: list, dtypes: list) -> tuple[float, float] | None:
    # gathers one log-probability per row and sums: reads the rows' picks
    args = tensor_args(shapes, dtypes)
    if len(args) < 2:
        return None
    (_, dt), (t, tt) = args[0], args[1]
    rows = numel(t)
    return float(rows), float(rows * itemsize(dt) + tensor_bytes(t, tt) + itemsize(dt))


@COSTS.cost("aten::nll_loss_backward", "aten::nll_loss2d_backward")
def nll_loss_backward(shapes: list, dtypes: list) -> tuple[float, float] | None:
    # (grad_output, self, target, weight, reduction, ignore_index, total_weight):
    # writes a dense gradient the size of self (mostly zeros)
    if len(shapes) < 3 or not is_tensor(dtypes[1]):
        return None
    x, dt = shapes[1], dtypes[1]
    rows = numel(shapes[2])
    return float(rows), float(tensor_bytes(x, dt) + tensor_bytes(shapes[2], dtypes[2]))


@COSTS.cost("aten::mse_loss", "aten::l1_loss", "aten::smooth_l1_loss", "aten::huber_loss",
      "aten::binary_cross_entropy", "aten::binary_cross_entropy_with_logits")
def pointwise_loss(shapes: list, dtypes: list) -> tuple[float, float] | None:
    args = tensor_args(shapes, dtypes)
    if not args:
        return None
    n = numel(args[0][0])
    return 3.0 * n, float(sum(tensor_bytes(s, d) for s, d in args))


@COSTS.cost("aten::mse_loss_backward", "aten::l1_loss_backward", "aten::smooth_l1_loss_backward",
      "aten::huber_loss_backward", "aten::binary_cross_entropy_backward")
def pointwise_loss_backward(shapes: list, dtypes: list) -> tuple[float, float] | None:
    args = tensor_args(shapes, dtypes)
    if len(args) < 2:
        return None
    n = numel(args[1][0])
    return 3.0 * n, float(sum(tensor_bytes(s, d) for s, d in args) + tensor_bytes(*args[1]))


def _pool_out(
    x: list, conc: list, k_idx: int, s_idx: int, p_idx: int, d_idx: int | None, ceil_idx: int
) -> list:
    kernel = parse_list(conc[k_idx]) if k_idx < len(conc) else None
    stride = parse_list(conc[s_idx]) if s_idx < len(conc) else None
    padding = parse_list(conc[p_idx]) if p_idx < len(conc) else None
    dilation = parse_list(conc[d_idx]) if d_idx is not None and d_idx < len(conc) else [1]
    kernel = kernel or [1]
    stride = stride or kernel  # an empty stride list means stride = kernel
    sp = conv_out_spatial(x[2:], kernel, stride, padding or [0], dilation or [1])
    if ceil_idx < len(conc) and conc[ceil_idx] == "True":  # ceil_mode: at most one more
        sp = [s + 1 for s in sp]
    return [*x[:2], *sp] if len(x) >= 3 else sp


def _kernel_volume(kernel: list | None, spatial_dims: int) -> int:
    kernel = kernel or [1]
    return numel(kernel) if len(kernel) > 1 else kernel[0] ** spatial_dims


def max_pool_cost(shapes: list, dtypes: list, conc: list, indices: bool) -> tuple[float, float] | None:
    # (input, kernel_size, stride, padding, dilation, ceil_mode)
    if not shapes or not shapes[0] or not is_tensor(dtypes[0]):
        return None
    x, dt = shapes[0], dtypes[0]
    kernel = parse_list(conc[1]) if len(conc) > 1 else None
    n_out = numel(_pool_out(list(x), conc, 1, 2, 3, 4, 5))
    # one compare per window element; the _with_indices form writes int64 indices
    idx = n_out * 8 if indices else 0
    flops = n_out * _kernel_volume(kernel, len(x) - 2)
    return float(flops), float(tensor_bytes(x, dt) + n_out * itemsize(dt) + idx)


@COSTS.cost("aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d", "aten::mkldnn_max_pool2d",
      "aten::quantized_max_pool2d")
def max_pool(shapes: list, dtypes: list, conc: list) -> tuple[float, float] | None:
    return max_pool_cost(shapes, dtypes, conc, indices=False)


@COSTS.cost("aten::max_pool2d_with_indices", "aten::max_pool3d_with_indices")
def max_pool_with_indices(shapes: list, dtypes: list, conc: list) -> tuple[float, float] | None:
    return max_pool_cost(shapes, dtypes, conc, indices=True)


@COSTS.cost("aten::max_pool2d_with_indices_backward", "aten::max_pool3d_with_indices_backward",
      "aten::max_pool2d_backward")
def max_pool_backward(shapes: list, dtypes: list) -> tuple[float, float] | None:
    # (grad_output, self, kernel, stride, padding, dilation, ceil_mode, indices):
    # zero-fill grad_input, scatter grad_output through the indices
    if len(shapes) < 2 or not shapes[0] or not is_tensor(dtypes[0]):
        return None
    gy, x = shapes[0], shapes[1]
    n_out = numel(gy)
    idx_bytes = n_out * 8
    return float(n_out), float(tensor_bytes(gy, dtypes[0]) + idx_bytes + tensor_bytes(x, dtypes[1]))


@COSTS.cost("aten::avg_pool1d", "aten::avg_pool2d", "aten::avg_pool3d")
def avg_pool(shapes: list, dtypes: list, conc: list) -> tuple[float, float] | None:
    if not shapes or not shapes[0] or not is_tensor(dtypes[0]):
        return None
    x, dt = shapes[0], dtypes[0]
    # (input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor)
    kernel = parse_list(conc[1]) if len(conc) > 1 else None
    n_out = numel(_pool_out(list(x), conc, 1, 2, 3, None, 4))
    flops = n_out * _kernel_volume(kernel, len(x) - 2)
    return float(flops), float(tensor_bytes(x, dt) + n_out * itemsize(dt))


@COSTS.cost("aten::avg_pool2d_backward", "aten::avg_pool3d_backward")
def avg_pool_backward(shapes: list, dtypes: list) -> tuple[float, float] | None:
    if len(shapes) < 2 or not is_tensor(dtypes[0]):
        return None
    gy, x = shapes[0], shapes[1]
    return float(numel(x)), float(tensor_bytes(gy, dtypes[0]) + tensor_bytes(x, dtypes[1]))


@COSTS.cost("aten::adaptive_avg_pool1d", "aten::adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d",
      "aten::adaptive_avg_pool3d", "aten::_adaptive_avg_pool3d", "aten::adaptive_max_pool2d",
      "aten::mkldnn_adaptive_avg_pool2d")
def adaptive_pool(shapes: list, dtypes: list, conc: list) -> tuple[float, float] | None:
    if not shapes or not shapes[0] or not is_tensor(dtypes[0]):
        return None
    x, dt = shapes[0], dtypes[0]
    size = parse_list(conc[1]) if len(conc) > 1 else None
    n_out = numel(x[:2]) * numel(size or [1])
    return float(numel(x)), float(tensor_bytes(x, dt) + n_out * itemsize(dt))


@COSTS.cost("aten::_adaptive_avg_pool2d_backward", "aten::_adaptive_avg_pool3d_backward",
      "aten::adaptive_max_pool2d_backward")
def adaptive_pool_backward(shapes: list, dtypes: list) -> tuple[float, float] | None:
    if len(shapes) < 2 or not is_tensor(dtypes[0]):
        return None
    gy, x = shapes[0], shapes[1]
    return float(numel(x)), float(tensor_bytes(gy, dtypes[0]) + tensor_bytes(x, dtypes[1]))
