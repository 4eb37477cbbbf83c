"""FLOP and minimal-byte formulas of the ``bn_act`` op's C++ custom ops
(csrc/bn_act.py, with and without the fused pool) for the roofline tool:
FLOP = 2 x MAC; bytes = every tensor input read once + every output written
once; arguments as the profiler records them, ``[]`` for non-tensors;
activation FLOPs as the vocabulary counts them.

Data only (no extension, no CuPy): the roofline finds ``COSTS`` through its
``dawnbench_fast.costs`` entry point (pyproject.toml); csrc/bn_act.py hands
it to ``roofline.registry.register_flop_formulas`` for FlopCounterMode.
"""

from __future__ import annotations

from dawnbench_fast.roofline.trace_args import arg_activation, arg_bytes, arg_numel, itemsize


def bn_act_fwd_cost(shapes, dtypes, concrete=None):
    """Statistics (3 FLOPs/element), normalise (2), activation."""
    x = shapes[0]
    n, c = arg_numel(x), (x[1] if len(x) > 1 else 1)
    flops = (3 + 2 + arg_activation(concrete, 8).flops) * n
    nbytes = 2 * arg_bytes(x, dtypes[0]) + (2 + 4) * 4 * c  # x, y; w, b; stats + running
    return flops, nbytes


def bn_act_bwd_cost(shapes, dtypes, concrete=None):
    """Recompute z, two sums, dx: 10 FLOPs; g = dy * act'(z): the vocabulary's
    grad_flops (as aten's *_backward ops count it)."""
    x = shapes[0]
    n, c = arg_numel(x), (x[1] if len(x) > 1 else 1)
    flops = (10 + arg_activation(concrete, 4).grad_flops) * n
    nbytes = 3 * arg_bytes(x, dtypes[0]) + 7 * 4 * c  # x, dy, dx; stats, dw, db
    return flops, nbytes


def pool_bn_act_fwd_cost(shapes, dtypes, concrete=None):
    """2x2 max-pool (3 compares per output), statistics (3), normalise (2),
    activation, per pooled element; reads x, writes y, the pooled tensor and
    one byte of argmax code per pooled element."""
    x = shapes[0]
    n, c = (x[0], x[1]) if len(x) == 4 else (1, 1)
    out = n * c * (x[2] // 2) * (x[3] // 2) if len(x) == 4 else 0
    flops = (3 + 3 + 2 + arg_activation(concrete, 8).flops) * out
    item = itemsize(dtypes[0])
    return flops, arg_bytes(x, dtypes[0]) + out * (2 * item + 1) + (2 + 4 + 4) * 4 * c


def pool_bn_act_bwd_cost(shapes, dtypes, concrete=None):
    """As csrc_bn_act_bwd per pooled element; reads pooled, codes, dy and
    writes the full-size dx (in_h x in_w, from the arguments when a trace has
    them, else twice the pooled size), or with pooled_dx the pooled-size one."""
    p = shapes[0]
    n, c = (p[0], p[1]) if len(p) == 4 else (1, 1)
    out = arg_numel(p)
    try:
        in_hw = int(concrete[4]) * int(concrete[5])
    except (TypeError, ValueError, IndexError):
        in_hw = 4 * (p[2] * p[3] if len(p) == 4 else 0)
    if concrete is not None and len(concrete) > 8 and concrete[8] == "True":  # pooled_dx
        in_hw = p[2] * p[3] if len(p) == 4 else 0
    flops = (10 + arg_activation(concrete, 7).grad_flops) * out
    item = itemsize(dtypes[0])
    return flops, out * (2 * item + 1) + n * c * in_hw * item + 7 * 4 * c


COSTS = {
    "dawnbench::csrc_bn_act_fwd": (bn_act_fwd_cost, False),
    "dawnbench::csrc_bn_act_bwd": (bn_act_bwd_cost, False),
    "dawnbench::csrc_pool_bn_act_fwd": (pool_bn_act_fwd_cost, False),
    "dawnbench::csrc_pool_bn_act_bwd": (pool_bn_act_bwd_cost, False),
}
