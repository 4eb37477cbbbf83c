"""Formulas of the fused ops whose faces compute the same thing, shared by
their cost tables (kernels/<op>_costs.py and csrc/<op>_costs.py name their
own custom ops, one formula serves both): FLOP = 2 x MAC; bytes = every
tensor input read once + every output written once; arguments as the
profiler records them, ``[]`` for non-tensors; activation FLOPs as the
vocabulary counts them (GELU where a trace does not say). Nothing here is
registered for an aten op: the op's tables register these under their names.
"""

from __future__ import annotations

from dawnbench_fast.roofline.trace_args import arg_activation, arg_bytes, arg_numel


def bias_act_cost(shapes, dtypes, concrete=None):
    """(x, bias, act): one add and the activation per element; reads x and
    bias, writes y."""
    x, b = shapes[0], shapes[1]
    flops = (1 + arg_activation(concrete, 2).flops) * arg_numel(x)
    return flops, 2 * arg_bytes(x, dtypes[0]) + arg_bytes(b, dtypes[1])


def bias_act_bwd_cost(shapes, dtypes, concrete=None):
    """(dy, x, bias, act): the add again, dy * act'(z) (the vocabulary's
    grad_flops) and one add of the bias gradient's sum per element; reads dy,
    x and bias, writes dx and the fp32 bias gradient."""
    dy, x, b = shapes[0], shapes[1], shapes[2]
    flops = (2 + arg_activation(concrete, 3).grad_flops) * arg_numel(x)
    nbytes = arg_bytes(dy, dtypes[0]) + 2 * arg_bytes(x, dtypes[1]) + arg_bytes(b, dtypes[2])
    return flops, nbytes + 4 * arg_numel(b)
