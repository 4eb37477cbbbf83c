"""FLOP and minimal-byte formula of the GEMM's C++ custom op (csrc/gemm.py)
for the roofline tool: FLOP = 2 x MAC; bytes = every tensor input read once +
every output written once; arguments as the profiler records them.

Data only (no extension, no CuPy): the roofline finds ``COSTS`` through its
``dawnbench_fast.costs`` entry point (pyproject.toml); csrc/gemm.py hands it
to ``roofline.registry.register_flop_formulas`` for FlopCounterMode.
"""

from __future__ import annotations

from dawnbench_fast.roofline.trace_args import arg_bytes


def gemm_mma_cost(shapes, dtypes, concrete=None):
    a, b = shapes[0], shapes[1]
    m, k = a
    n = b[1]
    return 2 * m * n * k, arg_bytes(a, dtypes[0]) + arg_bytes(b, dtypes[1]) + 4 * m * n


COSTS = {
    "dawnbench::csrc_gemm_mma": (gemm_mma_cost, True),
}
