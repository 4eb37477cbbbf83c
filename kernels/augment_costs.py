"""FLOP and minimal-byte formula of the ``augment`` op's Triton custom op
(kernels/augment.py) for the roofline tool: FLOP = 2 x MAC; bytes = every
tensor input read once + every output written once; arguments as the
profiler records them, ``[]`` for non-tensors. The benchmarks use it for
their GB/s figures.

Data only (no Triton): the roofline finds ``COSTS`` through its
``dawnbench_fast.costs`` entry point (pyproject.toml); kernels/augment.py
hands it to ``roofline.registry.register_flop_formulas`` for FlopCounterMode.
"""

from __future__ import annotations


def augment_cost(shapes, dtypes):
    """Gather of B uint8 images (indices is shapes[1]) into a normalised
    batch; the output dtype is not an input, counted as fp32 (upper bound)."""
    b = shapes[1][0]
    padded = shapes[0]
    c = padded[-1] if padded else 3
    pix = b * 32 * 32 * c
    return 2 * pix, pix * (1 + 4) + b * 5 * 4


COSTS = {
    "dawnbench::augment": (augment_cost, False),
}
