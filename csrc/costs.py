"""FLOP and minimal-byte formulas of the ``dawnbench::csrc_*`` custom ops for
the roofline tool (its conventions: FLOP = 2 x MAC; bytes = every tensor input
read once + every output written once; arguments as the profiler records
them, ``[]`` for non-tensors). Dtype sizes and activation FLOPs come from
``dawnbench_fast.vocabulary``.

This module is data: it imports neither the extension nor the roofline. The
roofline finds ``COSTS`` through the ``dawnbench_fast.costs`` entry point
(pyproject.toml); csrc/ops.py hands it to
``roofline.registry.register_flop_formulas`` for FlopCounterMode."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dawnbench_fast.vocabulary import ACTIVATIONS, Activation, itemsize


def _numel(shape: Sequence[int]) -> int:
    return int(math.prod(shape)) if shape else 0


def _nbytes(shape: Sequence[int], dtype: Any) -> int:
    return _numel(shape) * itemsize(dtype)


def _activation(concrete: Sequence[Any] | None, i: int) -> Activation:
    """The activation named by argument ``i``; GELU when the trace does not say
    (the profiler records no str argument)."""
    if concrete and len(concrete) > i:
        name = str(concrete[i]).strip("'\"")
        if name in ACTIVATIONS:
            return ACTIVATIONS[name]
    return ACTIVATIONS["gelu"]


def bn_act_fwd_cost(shapes, dtypes, concrete=None):
    """Statistics (3 FLOPs/element), normalise (2), activation."""
    x = shapes[0]
    n, c = _numel(x), (x[1] if len(x) > 1 else 1)
    flops = (3 + 2 + _activation(concrete, 8).flops) * n
    nbytes = 2 * _nbytes(x, dtypes[0]) + (2 + 4) * 4 * c  # x, y; w, b; stats + running
    return flops, nbytes


def bn_act_bwd_cost(shapes, dtypes, concrete=None):
    """Recompute z, two sums, dx: 10 FLOPs; g = dy * act'(z): the vocabulary's
    grad_flops (as aten's *_backward ops count it)."""
    x = shapes[0]
    n, c = _numel(x), (x[1] if len(x) > 1 else 1)
    flops = (10 + _activation(concrete, 4).grad_flops) * n
    nbytes = 3 * _nbytes(x, dtypes[0]) + 7 * 4 * c  # x, dy, dx; stats, dw, db
    return flops, nbytes


def pool_bn_act_fwd_cost(shapes, dtypes, concrete=None):
    """2x2 max-pool (3 compares per output), statistics (3), normalise (2),
    activation, per pooled element; reads x, writes y, the pooled tensor and
    one byte of argmax code per pooled element."""
    x = shapes[0]
    n, c = (x[0], x[1]) if len(x) == 4 else (1, 1)
    out = n * c * (x[2] // 2) * (x[3] // 2) if len(x) == 4 else 0
    flops = (3 + 3 + 2 + _activation(concrete, 8).flops) * out
    item = itemsize(dtypes[0])
    return flops, _nbytes(x, dtypes[0]) + out * (2 * item + 1) + (2 + 4 + 4) * 4 * c


def pool_bn_act_bwd_cost(shapes, dtypes, concrete=None):
    """As csrc_bn_act_bwd per pooled element; reads pooled, codes, dy and
    writes the full-size dx (in_h x in_w, from the arguments when a trace has
    them, else twice the pooled size)."""
    p = shapes[0]
    n, c = (p[0], p[1]) if len(p) == 4 else (1, 1)
    out = _numel(p)
    try:
        in_hw = int(concrete[4]) * int(concrete[5])
    except (TypeError, ValueError, IndexError):
        in_hw = 4 * (p[2] * p[3] if len(p) == 4 else 0)
    flops = (10 + _activation(concrete, 7).grad_flops) * out
    item = itemsize(dtypes[0])
    return flops, out * (2 * item + 1) + n * c * in_hw * item + 7 * 4 * c


def augment_cost(shapes, dtypes, concrete=None):
    """One multiply and one add per output element; one uint8 read each."""
    b = shapes[1][0] if shapes[1] else 0
    c = shapes[0][-1] if shapes[0] else 3
    size = int(concrete[5]) if concrete and len(concrete) > 5 and str(concrete[5]).isdigit() else 32
    out_item = 4
    if concrete and len(concrete) > 7 and ("16" in str(concrete[7])):
        out_item = 2
    n = b * size * size * c
    return 2 * n, n * (1 + out_item) + b * (8 + 20)


def conv3x3_wgrad_cost(shapes, dtypes, concrete=None):
    """3x3 weight gradient, counted as aten counts the convolution: 2 x N H W
    Cin Cout 9 (the border taps the kernel skips included, so the figure
    compares with oneDNN's); reads x and dY, writes dW (w's shape)."""
    x, g, w = shapes[0], shapes[1], shapes[2]
    flops = 2 * _numel(g) * (w[1] if len(w) > 1 else 0) * 9
    return flops, _nbytes(x, dtypes[0]) + _nbytes(g, dtypes[1]) + _nbytes(w, dtypes[2])


def conv3x3_wgrad_pooled_cost(shapes, dtypes, concrete=None):
    """The weight gradient before a 2x2 max-pool: the products it computes,
    one per pool window (2 x N floor(H/2) floor(W/2) Cin Cout 9, border taps
    included); reads x and dY, writes dW."""
    x, g, w = shapes[0], shapes[1], shapes[2]
    windows = g[0] * g[1] * (g[2] // 2) * (g[3] // 2) if len(g) == 4 else 0
    flops = 2 * windows * (w[1] if len(w) > 1 else 0) * 9
    return flops, _nbytes(x, dtypes[0]) + _nbytes(g, dtypes[1]) + _nbytes(w, dtypes[2])


def gemm_mma_cost(shapes, dtypes, concrete=None):
    a, b = shapes[0], shapes[1]
    m, k = a
    n = b[1]
    return 2 * m * n * k, _nbytes(a, dtypes[0]) + _nbytes(b, dtypes[1]) + 4 * m * n


COSTS = {
    "dawnbench::csrc_bn_act_fwd": (bn_act_fwd_cost, False),
    "dawnbench::csrc_bn_act_bwd": (bn_act_bwd_cost, False),
    "dawnbench::csrc_pool_bn_act_fwd": (pool_bn_act_fwd_cost, False),
    "dawnbench::csrc_pool_bn_act_bwd": (pool_bn_act_bwd_cost, False),
    "dawnbench::csrc_augment": (augment_cost, False),
    "dawnbench::csrc_gemm_mma": (gemm_mma_cost, True),
    "dawnbench::csrc_conv3x3_wgrad": (conv3x3_wgrad_cost, True),
    "dawnbench::csrc_conv3x3_wgrad_pooled": (conv3x3_wgrad_pooled_cost, True),
}

