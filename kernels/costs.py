"""FLOP and minimal-byte formulas of every Triton kernel's custom op, in the
roofline's convention (FLOP = 2 x MAC; bytes = each input read once + each
output written once). Arguments arrive as the profiler records them: one
entry per argument, ``[]`` for non-tensors; dtype names as in
``dawnbench_fast.vocabulary.DTYPE_BYTES``; activations counted as the
vocabulary counts them (the same as aten's ops in the roofline).

This module is data: it imports neither Triton nor the roofline. The roofline
finds ``COSTS`` through the ``dawnbench_fast.costs`` entry point
(pyproject.toml); the module defining the ops hands it to
``roofline.registry.register_flop_formulas`` for FlopCounterMode. The
benchmarks use the same formulas for their GB/s and TFLOP/s figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dawnbench_fast.vocabulary import ACTIVATIONS, Activation, itemsize

# The activation a formula assumes when the trace does not say: the profiler
# records no str argument, and GELU is the net's default.
_DEFAULT_ACT = ACTIVATIONS["gelu"]


def _n(shape: Sequence[int]) -> int:
    return int(math.prod(shape)) if shape else 0


def _b(shape: Sequence[int], dtype: Any) -> int:
    return _n(shape) * itemsize(dtype)


def _activation(concrete: Sequence[str] | None, i: int) -> Activation:
    if concrete and len(concrete) > i:
        name = str(concrete[i]).strip("'\"")
        if name in ACTIVATIONS:
            return ACTIVATIONS[name]
    return _DEFAULT_ACT


def _act(concrete: Sequence[str] | None, i: int) -> int:
    """Forward FLOPs per element of the activation named by argument ``i``."""
    return _activation(concrete, i).flops


def _act_grad(concrete: Sequence[str] | None, i: int) -> int:
    """FLOPs per element of grad * activation'(z), as aten's *_backward ops count."""
    return _activation(concrete, i).grad_flops


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
    return (5 + _act_grad(concrete, 4)) * _n(x), 2 * _b(x, dtypes[1]) + 4 * 4 * x[-1]


def bn_act_bwd_apply_cost(shapes, dtypes, concrete=None):
    x, idx = shapes[1], shapes[6]
    pooled = _n(idx) > 0
    out = 4 * _b(x, dtypes[1]) if pooled else _b(x, dtypes[1])
    nbytes = 2 * _b(x, dtypes[1]) + (_n(idx) if pooled else 0) + out + 4 * 4 * x[-1]
    return (6 + _act_grad(concrete, 8)) * _n(x), nbytes


def _conv_cost(shapes, dtypes, concrete, pool: bool):
    x, w = shapes[0], shapes[1]
    n, h, wd, cin = x
    cout = w[1]
    if pool:
        h, wd = 2 * (h // 2), 2 * (wd // 2)  # conv outputs a floor-mode pool keeps
    flops = 2 * n * h * wd * cin * cout * 9
    if _n(shapes[2]) > 0:  # prologue: scale, shift, activation per input element
        flops += (2 + _act(concrete, 4)) * _n(x)
    out = n * h * wd * cout // (4 if pool else 1)
    item = itemsize(dtypes[0])
    nbytes = _b(x, dtypes[0]) + _b(w, dtypes[1]) + out * item + (out if pool else 0)
    nbytes += 2 * 4 * (_n(shapes[2]) + cout)
    return flops, nbytes


def conv3x3_fwd_cost(shapes, dtypes, concrete=None):
    return _conv_cost(shapes, dtypes, concrete, pool=False)


def conv3x3_pool_fwd_cost(shapes, dtypes, concrete=None):
    return _conv_cost(shapes, dtypes, concrete, pool=True)


def conv3x3_wgrad_cost(shapes, dtypes, concrete=None):
    x, dy = shapes[0], shapes[1]
    n, h, w, cin = x
    cout = dy[-1]
    flops = 2 * n * h * w * cin * cout * 9
    if _n(shapes[2]) > 0:  # prologue recomputed for each of the 9 taps' loads
        flops += 9 * (2 + _act(concrete, 4)) * _n(x)
    nbytes = _b(x, dtypes[0]) + _b(dy, dtypes[1]) + 9 * cin * cout * 4 + 2 * 4 * _n(shapes[2])
    return flops, nbytes


def gemm_cost(shapes, dtypes):
    (m, k), (_, n) = shapes[0], shapes[1]
    item = itemsize(dtypes[0])
    return 2 * m * n * k, (m * k + k * n + m * n) * item


def gemm_axpby_cost(shapes, dtypes):
    (m, k), (_, n) = shapes[0], shapes[1]
    item = itemsize(dtypes[0])
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

