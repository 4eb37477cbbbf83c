"""FLOP and minimal-byte formulas of the ``bn_act`` op's Triton custom ops
(kernels/bn_act.py; kernels/conv_group.py runs them too) for the roofline
tool: FLOP = 2 x MAC; bytes = every tensor input read once + every output
written once; arguments as the profiler records them, ``[]`` for
non-tensors; activation FLOPs as the vocabulary counts them (the same as
aten's ops in the roofline).

Data only (no Triton): the roofline finds ``COSTS`` through its
``dawnbench_fast.costs`` entry point (pyproject.toml); kernels/bn_act.py
hands it to ``roofline.registry.register_flop_formulas`` for FlopCounterMode.
"""

from __future__ import annotations

from dawnbench_fast.roofline.trace_args import arg_activation, arg_bytes, arg_numel


def channel_stats_cost(shapes, dtypes):
    x = shapes[0]
    return 3 * arg_numel(x), arg_bytes(x, dtypes[0]) + 2 * 4 * x[-1]


def bn_finalize_cost(shapes, dtypes):
    p = shapes[0]  # [P, C] partials
    c = p[-1] if p else shapes[3][0]
    return 2 * arg_numel(p) + 12 * c, 2 * 4 * arg_numel(p) + (4 + 2 + 4) * 4 * c


def bn_bwd_coefficients_cost(shapes, dtypes):
    p = shapes[0]  # [P, C] partials of sum(g), and sum(g*x) beside it
    c = p[-1]
    return 2 * arg_numel(p) + 12 * c, 2 * 4 * arg_numel(p) + (3 + 4) * 4 * c


def affine_act_cost(shapes, dtypes, concrete=None):
    x = shapes[0]
    flops = (2 + arg_activation(concrete, 3).flops) * arg_numel(x)
    return flops, 2 * arg_bytes(x, dtypes[0]) + 2 * 4 * x[-1]


def bn_act_bwd_reduce_cost(shapes, dtypes, concrete=None):
    x = shapes[1]
    flops = (5 + arg_activation(concrete, 4).grad_flops) * arg_numel(x)
    return flops, 2 * arg_bytes(x, dtypes[1]) + 4 * 4 * x[-1]


def bn_act_bwd_apply_cost(shapes, dtypes, concrete=None):
    x, idx = shapes[1], shapes[6]
    pooled = arg_numel(idx) > 0
    out = 4 * arg_bytes(x, dtypes[1]) if pooled else arg_bytes(x, dtypes[1])
    nbytes = 2 * arg_bytes(x, dtypes[1]) + (arg_numel(idx) if pooled else 0) + out + 4 * 4 * x[-1]
    return (6 + arg_activation(concrete, 8).grad_flops) * arg_numel(x), nbytes


COSTS = {
    "dawnbench::channel_stats": (channel_stats_cost, False),
    "dawnbench::bn_finalize": (bn_finalize_cost, False),
    "dawnbench::bn_bwd_coefficients": (bn_bwd_coefficients_cost, False),
    "dawnbench::affine_act": (affine_act_cost, False),
    "dawnbench::bn_act_bwd_reduce": (bn_act_bwd_reduce_cost, False),
    "dawnbench::bn_act_bwd_apply": (bn_act_bwd_apply_cost, False),
}
