"""FLOP and minimal-byte formula of the ``augment`` op's C++ custom op
(csrc/augment.py) for the roofline tool: FLOP = 2 x MAC; bytes = every
tensor input read once + every output written once; arguments as the
profiler records them, ``[]`` for non-tensors.

Data only (no extension, no CuPy): the roofline finds ``COSTS`` through its
``dawnbench_fast.costs`` entry point (pyproject.toml); csrc/augment.py hands
it to ``roofline.registry.register_flop_formulas`` for FlopCounterMode.
"""

from __future__ import annotations


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


COSTS = {
    "dawnbench::csrc_augment": (augment_cost, False),
}
