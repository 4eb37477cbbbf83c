"""FLOP and minimal-byte formulas of the GEMM's Triton custom ops
(kernels/gemm.py) for the roofline tool: FLOP = 2 x MAC; bytes = every
tensor input read once + every output written once; arguments as the
profiler records them. The benchmarks use the same formulas for their
TFLOP/s figures.

Data only (no Triton): the roofline finds ``COSTS`` through its
``dawnbench_fast.costs`` entry point (pyproject.toml); kernels/gemm.py hands
it to ``roofline.registry.register_flop_formulas`` for FlopCounterMode.
"""

from __future__ import annotations

from dawnbench_fast.roofline.trace_args import itemsize


def gemm_cost(shapes, dtypes):
    (m, k), (_, n) = shapes[0], shapes[1]
    item = itemsize(dtypes[0])
    return 2 * m * n * k, (m * k + k * n + m * n) * item


def gemm_axpby_cost(shapes, dtypes):
    (m, k), (_, n) = shapes[0], shapes[1]
    item = itemsize(dtypes[0])
    return 2 * m * n * k + 3 * m * n, (m * k + k * n + 2 * m * n) * item


COSTS = {
    "dawnbench::gemm": (gemm_cost, True),
    "dawnbench::gemm_axpby": (gemm_axpby_cost, True),
}
