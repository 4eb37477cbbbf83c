"""FLOP and minimal-byte formulas of the ``conv_group`` op's Triton custom
ops (kernels/conv_group.py) for the roofline tool: FLOP = 2 x MAC; bytes =
every tensor input read once + every output written once; arguments as the
profiler records them, ``[]`` for non-tensors; activation FLOPs as the
vocabulary counts them. The benchmarks use the same formulas for their
TFLOP/s figures.

Data only (no Triton): the roofline finds ``COSTS`` through its
``dawnbench_fast.costs`` entry point (pyproject.toml); kernels/conv_group.py
hands it to ``roofline.registry.register_flop_formulas`` for FlopCounterMode.
"""

from __future__ import annotations

from dawnbench_fast.roofline.trace_args import arg_activation, arg_bytes, arg_numel, itemsize


def _conv_cost(shapes, dtypes, concrete, pool: bool):
    x, w = shapes[0], shapes[1]
    n, h, wd, cin = x
    cout = w[1]
    if pool:
        h, wd = 2 * (h // 2), 2 * (wd // 2)  # conv outputs a floor-mode pool keeps
    flops = 2 * n * h * wd * cin * cout * 9
    if arg_numel(shapes[2]) > 0:  # prologue: scale, shift, activation per input element
        flops += (2 + arg_activation(concrete, 4).flops) * arg_numel(x)
    out = n * h * wd * cout // (4 if pool else 1)
    item = itemsize(dtypes[0])
    nbytes = arg_bytes(x, dtypes[0]) + arg_bytes(w, dtypes[1]) + out * item + (out if pool else 0)
    nbytes += 2 * 4 * (arg_numel(shapes[2]) + cout)
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
    if arg_numel(shapes[2]) > 0:  # prologue recomputed for each of the 9 taps' loads
        flops += 9 * (2 + arg_activation(concrete, 4).flops) * arg_numel(x)
    nbytes = arg_bytes(x, dtypes[0]) + arg_bytes(dy, dtypes[1]) + 9 * cin * cout * 4
    nbytes += 2 * 4 * arg_numel(shapes[2])
    return flops, nbytes


COSTS = {
    "dawnbench::conv3x3_fwd": (conv3x3_fwd_cost, True),
    "dawnbench::conv3x3_pool_fwd": (conv3x3_pool_fwd_cost, True),
    "dawnbench::conv3x3_wgrad": (conv3x3_wgrad_cost, True),
}
