"""FLOP and minimal-byte formulas of the ``bias_act`` op's Triton custom ops
(kernels/bias_act.py) for the roofline tool; the formulas are roofline/cost_fused.py's, one for
every face of the op.

Data only (no Triton): the roofline finds ``COSTS`` through its
``dawnbench_fast.costs`` entry point (pyproject.toml); kernels/bias_act.py
hands it to ``roofline.registry.register_flop_formulas`` for FlopCounterMode.
"""

from __future__ import annotations

from dawnbench_fast.roofline.cost_fused import bias_act_bwd_cost, bias_act_cost

COSTS = {
    "dawnbench::bias_act": (bias_act_cost, False),
    "dawnbench::bias_act_bwd": (bias_act_bwd_cost, False),
}
