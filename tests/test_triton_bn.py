"""Batch norm + activation kernels (statistics, finalize, affine+act, backward)
against PyTorch, in the Triton interpreter on CPU tensors.

bf16 is tested for storage and conversion only: the interpreter has no bf16
arithmetic, so bf16 tensors are widened to fp32 inside the kernels.
"""

import copy
import zlib

import pytest
import torch

from dawnbench_fast.kernels import custom_ops, launch_counts, ops
from dawnbench_fast.kernels.bn_finalize import bn_finalize_reference
from dawnbench_fast.kernels.launches import poisoned_outputs
from dawnbench_fast.models.layers import ACTIVATIONS, BatchNorm
from dawnbench_fast.models.layers import bn_act as bn_act_ref


@pytest.fixture(autouse=True)
def _seed(request):
    """Random (never zero) inputs, reproducible per test id."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(autouse=True)
def _small_tiles(monkeypatch):
    """16-row tiles: several tiles and programs per test, masked edges."""
    monkeypatch.setattr(custom_ops, "INTERPRETER_ROWS", 16)

TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.mark.parametrize("rows,chans", [(1, 3), (37, 20), (130, 70)])
@pytest.mark.parametrize("deterministic", [False, True])
def test_channel_stats(rows, chans, deterministic):
    x = torch.randn(rows, chans) * 3 + 1
    with poisoned_outputs():
        s, q = custom_ops.channel_stats(x, deterministic)
    if not deterministic:
        assert s.shape[0] == 1  # atomics: one row
    torch.testing.assert_close(s.sum(0), x.sum(0), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(q.sum(0), (x * x).sum(0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("training", [True, False])
def test_bn_finalize_matches_reference(training):
    C, n = 19, 50
    x = torch.randn(n, C) * 2 + 0.5
    s, q = x.sum(0, keepdim=True), (x * x).sum(0, keepdim=True)
    w, b = torch.rand(C) + 0.5, torch.randn(C)
    rm, rv = torch.randn(C), torch.rand(C) + 0.1
    rm2, rv2 = rm.clone(), rv.clone()
    with poisoned_outputs():
        got = custom_ops.bn_finalize(s, q, float(n), w, b, rm, rv, 0.4, 1e-5, training, True)
    want = bn_finalize_reference(s[0], q[0], n, w, b, rm2, rv2, 0.4, 1e-5, training)
    for g, r in zip(got, want, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rm, rm2)
    torch.testing.assert_close(rv, rv2)


@pytest.mark.parametrize("act", ["gelu", "relu", "silu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_affine_act(act, dtype):
    x = torch.randn(45, 21).to(dtype)
    scale, shift = torch.rand(21) + 0.5, torch.randn(21)
    with poisoned_outputs():
        y = custom_ops.affine_act(x, scale, shift, act)
    want = ACTIVATIONS[act](x.float() * scale + shift)
    assert y.dtype == dtype
    torch.testing.assert_close(y.float(), want, rtol=TOL[dtype], atol=TOL[dtype])


def _bn_pair(chans, training):
    bn = BatchNorm(chans)
    bn.bias.data.normal_()
    bn.weight.data.uniform_(0.5, 1.5)  # frozen in the net, but exercise it
    bn.running_mean.normal_()
    bn.running_var.uniform_(0.5, 2)
    bn.train(training)
    return bn, copy.deepcopy(bn)


@pytest.mark.parametrize("shape", [(1, 20, 3, 5), (3, 12, 5, 5), (2, 70, 3, 3)])
@pytest.mark.parametrize("act", ["gelu", "relu"])
@pytest.mark.parametrize("training", [True, False])
def test_bn_act_forward_backward(shape, act, training):
    bn, bn_ref = _bn_pair(shape[1], training)
    bn.weight.requires_grad_(True)
    bn_ref.weight.requires_grad_(True)
    x = (torch.randn(shape) * 2 + 0.3).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    before = launch_counts["bn_act_bwd_apply"]
    with poisoned_outputs():
        y = ops.bn_act(x, bn, act)
        dy = torch.randn(shape)
        (y * dy).sum().backward()
    y_ref = bn_act_ref(x_ref, bn_ref, act)
    (y_ref * dy).sum().backward()
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(bn.bias.grad, bn_ref.bias.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(bn.weight.grad, bn_ref.weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(bn.running_mean, bn_ref.running_mean)
    torch.testing.assert_close(bn.running_var, bn_ref.running_var)
    assert int(bn.num_batches_tracked) == int(bn_ref.num_batches_tracked)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert launch_counts["bn_act_bwd_apply"] == before + 1


def test_bn_act_bf16_storage():
    """bf16 activations: stored bf16, statistics and math in fp32."""
    bn, bn_ref = _bn_pair(24, True)
    x = torch.randn(2, 24, 4, 3).bfloat16()
    with poisoned_outputs():
        y = ops.bn_act(x, bn, "gelu")
    y_ref = bn_act_ref(x.float(), bn_ref, "gelu")
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), y_ref, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(bn.running_mean, bn_ref.running_mean, rtol=1e-4, atol=1e-5)


def test_bn_act_deterministic_mode_is_bitwise_repeatable():
    x = torch.randn(4, 33, 5, 5)
    bn, _ = _bn_pair(33, True)
    old = custom_ops.DETERMINISTIC_STATS
    custom_ops.DETERMINISTIC_STATS = True
    try:
        a = ops.bn_act(x, copy.deepcopy(bn), "gelu")
        b = ops.bn_act(x, copy.deepcopy(bn), "gelu")
    finally:
        custom_ops.DETERMINISTIC_STATS = old
    assert torch.equal(a, b)
