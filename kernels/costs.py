"""FLOP and minimal-byte formulas of every Triton kernel's custom op, in the
roofline's convention (FLOP = 2 x MAC; bytes = each input read once + each
output written once). Arguments arrive as the profiler records them: one
entry per argument, ``[]`` for non-tensors; dtype names as in
``dawnbench_fast.roofline.costs.DTYPE_BYTES``.

The benchmarks use the same formulas for their GB/s and TFLOP/s figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dawnbench_fast.roofline.costs import register_costs

# Bytes per element for the profiler's dtype names (and torch's), fp32 default.
_ITEM = {"float": 4, "c10::Half": 2, "c10::BFloat16": 2, "signed char": 1,
         "unsigned char": 1, "int": 4, "long int": 8, "bool": 1,
         "torch.float32": 4, "torch.float16": 2, "torch.bfloat16": 2, "torch.int8": 1,
         "torch.uint8": 1, "torch.int32": 4, "torch.int64": 8, "torch.bool": 1}

# FLOPs per element of each activation (forward; the derivative costs about 2x).
ACT_FLOPS = {"identity": 0, "relu": 1, "gelu": 8, "silu": 4}


def _n(shape: Sequence[int]) -> int:
    return int(math.prod(shape)) if shape else 0


def _b(shape: Sequence[int], dtype: Any) -> int:
    return _n(shape) * _ITEM.get(str(dtype), 4)


def _act(concrete: Sequence[str] | None, i: int) -> int:
    """Activation FLOPs from the recorded string argument, GELU when unknown."""
    if concrete and len(concrete) > i:
        name = str(concrete[i]).strip("'\"")
        if name in ACT_FLOPS:
            return ACT_FLOPS[name]
    return ACT_FLOPS["gelu"]


def channel_stats_cost(shapes, dtypes):
    x = shapes[0]
    return 3 * _n(x), _b(x, dtypes[0]) + 2 * 4 * x[-1]


def bn_finalize_cost(shapes, dtypes):
    p = shapes[0]  # [P, C] partials
    c = p[-1] if p else shapes[3][0]
    return 2 * _n(p) + 12 * c, 2 * 4 * _n(p) + (4 + 2 + 4) * 4 * c


def affine_act_cost(shapes, dtypes, concrete=None):
    x = shapes[0]
    return (2 + _act(concrete, 3)) * _n(x), 2 * _b(x, dtypes[0]) + 2 * 4 * x[-1]


def bn_act_bwd_reduce_cost(shapes, dtypes, concrete=None):
    x = shapes[1]
    return (5 + 2 * _act(concrete, 4)) * _n(x), 2 * _b(x, dtypes[1]) + 4 * 4 * x[-1]


def bn_act_bwd_apply_cost(shapes, dtypes, concrete=None):
    x, idx = shapes[1], shapes[6]
    pooled = _n(idx) > 0
    out = 4 * _b(x, dtypes[1]) if pooled else _b(x, dtypes[1])
    nbytes = 2 * _b(x, dtypes[1]) + (_n(idx) if pooled else 0) + out + 4 * 4 * x[-1]
    return (6 + 2 * _act(concrete, 8)) * _n(x), nbytes


def _conv_cost(shapes, dtypes, pool: bool):
    x, w = shapes[0], shapes[1]
    n, h, wd, cin = x
    cout = w[1]
    if pool:
        h, wd = 2 * (h // 2), 2 * (wd // 2)  # conv outputs a floor-mode pool keeps
    flops = 2 * n * h * wd * cin * cout * 9
    if _n(shapes[2]) > 0:  # prologue: scale, shift, activation per input element
        flops += (2 + ACT_FLOPS["gelu"]) * _n(x)
    out = n * h * wd * cout // (4 if pool else 1)
    item = _ITEM.get(str(dtypes[0]), 4)
    nbytes = _b(x, dtypes[0]) + _b(w, dtypes[1]) + out * item + (out if pool else 0)
    nbytes += 2 * 4 * (_n(shapes[2]) + cout)
    return flops, nbytes


def conv3x3_fwd_cost(shapes, dtypes):
    return _conv_cost(shapes, dtypes, pool=False)


def conv3x3_pool_fwd_cost(shapes, dtypes):
    return _conv_cost(shapes, dtypes, pool=True)


def conv3x3_wgrad_cost(shapes, dtypes):
    x, dy = shapes[0], shapes[1]
    n, h, w, cin = x
    cout = dy[-1]
    flops = 2 * n * h * w * cin * cout * 9
    if _n(shapes[2]) > 0:  # prologue recomputed for each of the 9 taps' loads
        flops += 9 * (2 + ACT_FLOPS["gelu"]) * _n(x)
    nbytes = _b(x, dtypes[0]) + _b(dy, dtypes[1]) + 9 * cin * cout * 4 + 2 * 4 * _n(shapes[2])
    return flops, nbytes


def gemm_cost(shapes, dtypes):
    (m, k), (_, n) = shapes[0], shapes[1]
    item = _ITEM.get(str(dtypes[0]), 4)
    return 2 * m * n * k, (m * k + k * n + m * n) * item


def gemm_axpby_cost(shapes, dtypes):
    (m, k), (_, n) = shapes[0], shapes[1]
    item = _ITEM.get(str(dtypes[0]), 4)
    return 2 * m * n * k + 3 * m * n, (m * k + k * n + 2 * m * n) * item


def augment_cost(shapes, dtypes):
    """Gather of B uint8 images (indices is shapes[1]) into a normalised
    batch; the output dtype is not an input, counted as fp32 (upper bound)."""
    b = shapes[1][0]
    padded = shapes[0]
    c = padded[-1] if padded else 3
    pix = b * 32 * 32 * c
    return 2 * pix, pix * (1 + 4) + b * 5 * 4


COSTS = {
    "dawnbench::channel_stats": (channel_stats_cost, False),
    "dawnbench::bn_finalize": (bn_finalize_cost, False),
    "dawnbench::affine_act": (affine_act_cost, False),
    "dawnbench::bn_act_bwd_reduce": (bn_act_bwd_reduce_cost, False),
    "dawnbench::bn_act_bwd_apply": (bn_act_bwd_apply_cost, False),
    "dawnbench::conv3x3_fwd": (conv3x3_fwd_cost, True),
    "dawnbench::conv3x3_pool_fwd": (conv3x3_pool_fwd_cost, True),
    "dawnbench::conv3x3_wgrad": (conv3x3_wgrad_cost, True),
    "dawnbench::gemm": (gemm_cost, True),
    "dawnbench::gemm_axpby": (gemm_axpby_cost, True),
    "dawnbench::augment": (augment_cost, False),
}


register_costs(COSTS)
