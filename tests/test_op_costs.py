"""The FLOP/byte formulas of our custom ops (kernels/costs.py, csrc/costs.py)
as the roofline counts them, and the profiler seeing the ops by name."""

import pytest
import torch

from dawnbench_fast.csrc import ops as csrc_ops
from dawnbench_fast.models.layers import BatchNorm


def test_cost_formulas():
    from dawnbench_fast.roofline.costs import count

    flops, nbytes = count("dawnbench::gemm", [[64, 32], [32, 16]], ["c10::BFloat16"] * 2)
    assert flops == 2 * 64 * 32 * 16 and nbytes == (64 * 32 + 32 * 16 + 64 * 16) * 2
    # conv 3x3, 8x8 -> pooled 4x4, Cin 24, Cout 64, bf16, no prologue
    shapes = [[2, 8, 8, 24], [216, 64], [0], [0], [], [], []]
    f, b = count("dawnbench::conv3x3_pool_fwd", shapes, ["c10::BFloat16", "c10::BFloat16",
                                                          "float", "float", "", "", ""])
    assert f == 2 * 2 * 8 * 8 * 24 * 64 * 9
    assert b >= (2 * 8 * 8 * 24 + 216 * 64 + 2 * 4 * 4 * 64) * 2


def test_profiler_sees_the_custom_ops_and_roofline_has_their_costs():
    from torch.profiler import ProfilerActivity, profile

    from dawnbench_fast.csrc import costs as csrc_costs

    roofline_costs = pytest.importorskip("dawnbench_fast.roofline.costs")
    x = torch.randn(4, 8, 5, 5, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        csrc_ops.bn_act(x, BatchNorm(8), "gelu").sum().backward()
    names = {e.name for e in prof.events()}
    assert {"dawnbench::csrc_bn_act_fwd", "dawnbench::csrc_bn_act_bwd"} <= names
    for name in csrc_costs.COSTS:
        assert roofline_costs.has_cost(name), name
    flops, nbytes = csrc_costs.bn_act_fwd_cost([[4, 8, 5, 5], [8], [8], [8], [8]],
                                               ["float"] * 5, [None] * 8 + ["'relu'"])
    assert flops == (3 + 2 + 1) * 800 and nbytes == 2 * 800 * 4 + 6 * 4 * 8
    assert csrc_costs.gemm_mma_cost([[64, 32], [32, 16]], ["c10::Half"] * 2) == (
        2 * 64 * 16 * 32, 64 * 32 * 2 + 32 * 16 * 2 + 64 * 16 * 4)
