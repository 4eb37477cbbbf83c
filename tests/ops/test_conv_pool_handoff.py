"""The pool's own gradient handed to the before-pool conv (csrc/conv_group.py's
ConvPoolBnAct): the ``*_from_pool`` kernels against the same kernels reading
the full-size dY, bit for bit (both CPU copies for the data gradient); the
fused pool + BN + act backward's pooled dx against its full-size one; and
the cpu conv group as one node against the two nodes it replaces (outputs,
every gradient, running statistics, run.json's method list), also where the
backward falls back to the full-size dY (oneDNN's data gradient).

dY is a pool gradient by construction (tests/support/pool_grads.py), with
exact +0 and -0 values, odd and non-square maps, channels off the kernels'
blocks (input 5, 17; output 16, 48); outputs are poisoned before each call.
"""

from __future__ import annotations

import copy

import pytest
import torch
from support.poison import poison_new_output
from support.pool_grads import channels_last, pool_grad_parts

from dawnbench_fast.csrc import bn_act, conv_group, conv_group_dgrad, conv_group_wgrad, native
from dawnbench_fast.csrc.bn_act import pool_bn_act_bwd, pool_bn_act_fwd
from dawnbench_fast.models.layers import ConvGroup

pytestmark = pytest.mark.skipif(not conv_group_dgrad.supported(), reason="needs the C++ build")

# (N, Cin, Cout, H, W)
SHAPES = [(2, 5, 16, 7, 9), (3, 17, 48, 6, 5), (1, 5, 16, 2, 3), (2, 24, 32, 15, 15)]


@pytest.mark.parametrize("w_layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_data_gradient_from_the_pool_is_the_full_size_ones_bits(shape, w_layout, monkeypatch):
    """w also in channels_last memory, as the net's bf16 copy of a channels_last
    weight is (a first version read a temporary contiguous copy of it through a
    pointer after the copy was freed: NaN in training, not in a fresh process)."""
    n, cin, cout, h, w = shape
    gen = torch.Generator().manual_seed(sum(shape))
    dp, codes, dense = pool_grad_parts(n, cout, h, w, gen)
    wt = (torch.randn(cout, cin, 3, 3, generator=gen) / 9).bfloat16()
    if w_layout == "channels_last":
        wt = channels_last(wt)
    poison_new_output(monkeypatch, conv_group_dgrad)
    mod = native.load()
    was = mod.cpu_path()
    try:
        for name, ok in mod.cpu_paths():
            if not ok:
                continue
            mod.set_cpu_path(name)
            want = conv_group_dgrad.conv3x3_dgrad_pooled(dense, wt)
            got = conv_group_dgrad.conv3x3_dgrad_from_pool(dp, codes, wt, h, w)
            assert torch.equal(got, want), name
    finally:
        mod.set_cpu_path(was)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_weight_gradient_from_the_pool_is_the_full_size_ones_bits(shape, monkeypatch):
    if not conv_group_wgrad.supported():
        pytest.skip("the before-pool weight gradient needs AVX-512 BF16")
    n, cin, cout, h, w = shape
    gen = torch.Generator().manual_seed(7 + sum(shape))
    dp, codes, dense = pool_grad_parts(n, cout, h, w, gen)
    x = channels_last(torch.randn(n, cin, h, w, generator=gen).bfloat16())
    wt = torch.empty(cout, cin, 3, 3, dtype=torch.bfloat16)
    poison_new_output(monkeypatch, conv_group_wgrad)
    want = conv_group_wgrad.conv3x3_wgrad_pooled(x, dense, wt)
    got = conv_group_wgrad.conv3x3_wgrad_from_pool(x, dp, codes, wt)
    assert torch.equal(got, want) and not got.isnan().any()


def test_the_pool_backward_hands_over_what_it_would_scatter(monkeypatch):
    gen = torch.Generator().manual_seed(3)
    y = channels_last(torch.randn(3, 24, 9, 7, generator=gen).bfloat16())
    weight, bias = torch.rand(24, generator=gen) + 0.5, torch.randn(24, generator=gen)
    _, pooled, codes, stats, _, _ = pool_bn_act_fwd(y, weight, bias, None, None, True, 1e-5, 0.1, "silu")
    dy = channels_last(torch.randn(pooled.shape, generator=gen).bfloat16())
    poison_new_output(monkeypatch, bn_act)
    full, dw_full, db_full = pool_bn_act_bwd(pooled, codes, dy, stats, 9, 7, True, "silu")
    dp, dw, db = pool_bn_act_bwd(pooled, codes, dy, stats, 9, 7, True, "silu", pooled_dx=True)
    assert dp.shape == pooled.shape
    assert torch.equal(dw, dw_full) and torch.equal(db, db_full)
    placed = torch.zeros_like(full)
    for q in range(4):
        placed[:, :, q // 2:8:2, q % 2:6:2] = torch.where(codes == q, dp, torch.zeros_like(dp))
    assert torch.equal(placed, full)


def _group_run(x0, group, upstream):
    """Output, every gradient and the running statistics of one cpu group
    forward + backward under bf16 autocast (as the net runs it)."""
    x = x0.clone().requires_grad_()
    group.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = conv_group.conv_group_cpu(group, x)
    out.float().backward(upstream)
    grads = [x.grad] + [p.grad for p in group.parameters() if p.requires_grad]
    stats = [b.clone() for b in group.buffers()]
    return [out.detach(), *grads, *stats], conv_group.chosen_methods()


@pytest.mark.parametrize("dgrad_method", ["pooled", "pooled-fma", "aten"])
def test_the_group_as_one_node_is_the_two_nodes_bit_for_bit(dgrad_method, monkeypatch):
    """The default (both kernels from the pool) and the fallback (oneDNN's data
    gradient: the full-size dY written and read as before)."""
    monkeypatch.setattr(conv_group_dgrad, "_METHOD", [dgrad_method])
    # where oneDNN has AMX the default weight gradient is oneDNN's and the one node never reads the
    # pool's gradient: test the hand-off that Zen-class machines run, on every machine
    monkeypatch.setattr(conv_group_wgrad, "onednn_has_amx", lambda: False)
    torch.manual_seed(11)
    template = ConvGroup(24, 32, act="silu")
    x0 = channels_last(torch.randn(4, 24, 15, 15, generator=torch.Generator().manual_seed(5)))
    upstream = torch.randn(4, 32, 7, 7, generator=torch.Generator().manual_seed(6))
    results = {}
    ran = []
    for name, module in (("dgrad", conv_group_dgrad), ("wgrad", conv_group_wgrad)):
        real = getattr(module, f"conv3x3_{name}_from_pool")
        monkeypatch.setattr(module, f"conv3x3_{name}_from_pool",
                            lambda *a, _real=real, _name=name: ran.append(_name) or _real(*a))
    for handoff in (True, False):
        group = copy.deepcopy(template)
        group.bn_act = conv_group.bn_act  # the cpu backend's, as CifarNet.set_kernels sets it
        monkeypatch.setattr(conv_group, "POOL_HANDOFF", handoff)
        monkeypatch.setattr(conv_group, "_CHOICE", {})
        monkeypatch.setattr(conv_group_dgrad, "RAN", {})
        monkeypatch.setattr(conv_group, "_BEFORE_POOL_RAN", set())
        results[handoff] = _group_run(x0, group, upstream)
    (one, methods_one), (two, methods_two) = results[True], results[False]
    trained = sum(p.requires_grad for p in template.parameters())
    assert trained >= 4  # two conv weights and at least the BN biases
    assert len(one) == len(two) == 2 + trained + len(list(template.buffers()))
    for a, b in zip(one, two, strict=True):
        assert a is not None and torch.equal(a, b)
    assert methods_one == methods_two
    # the one node read the pool's gradient where both kernels run (the weight gradient's needs
    # AVX-512 BF16), else the full-size dY
    pooled = dgrad_method in conv_group_dgrad.POOLED_METHODS
    assert ran == (["dgrad", "wgrad"] if pooled and conv_group_wgrad.supported() else [])
    assert any("data gradient" in k for k in methods_one) == pooled
