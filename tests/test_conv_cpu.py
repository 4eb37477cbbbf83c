"""The cpu backend's 3x3 conv: every weight-gradient method and the autograd
Function against torch's conv2d autograd, fp32 and bf16, odd sizes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dawnbench_fast.models import conv_cpu

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}
SHAPES = [(1, 3, 5, 7), (3, 24, 17, 13), (5, 13, 9, 31)]  # (N, Cin, HW, Cout): odd on purpose


def inputs(n, cin, hw, cout, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, cin, hw, hw + 2, generator=gen).to(dtype).to(memory_format=torch.channels_last)
    w = (torch.randn(cout, cin, 3, 3, generator=gen) / (3 * cin**0.5)).to(dtype)
    g = torch.randn(n, cout, hw, hw + 2, generator=gen).to(dtype)
    return x, w, g


def scaled_close(got, want, tol):
    """Compare relative to the tensor's scale (bf16 sums of many terms)."""
    scale = want.float().abs().max().clamp_min(1e-6)
    torch.testing.assert_close(got.float() / scale, want.float() / scale, **tol)


@pytest.mark.parametrize("method", conv_cpu.WGRAD_METHODS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_weight_gradient_methods(method, dtype, shape):
    x, w, g = inputs(*shape, dtype, seed=sum(shape))
    want = torch.ops.aten.convolution_backward(
        g.double(), x.double(), w.double(), None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
        [False, True, False])[1]
    got = conv_cpu._METHODS[method](x, g.contiguous(memory_format=torch.channels_last), w)
    assert got.shape == w.shape and got.dtype == dtype and torch.isfinite(got).all()
    scaled_close(got, want, TOL[dtype])


@pytest.mark.parametrize("method", [None, *conv_cpu.WGRAD_METHODS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv3x3_function_matches_conv2d_autograd(method, dtype, monkeypatch):
    monkeypatch.setattr(conv_cpu, "FORCE", method)
    x, w, g = inputs(3, 13, 9, 20, dtype, seed=5)
    x1, w1 = x.clone().requires_grad_(), w.clone().requires_grad_()
    x2, w2 = x.double().requires_grad_(), w.double().requires_grad_()
    y1 = conv_cpu.Conv3x3.apply(x1, w1)
    y2 = F.conv2d(x2, w2, padding=1)
    scaled_close(y1, y2, TOL[dtype])
    y1.backward(g)
    y2.backward(g.double())
    scaled_close(x1.grad, x2.grad, TOL[dtype])
    scaled_close(w1.grad, w2.grad, TOL[dtype])


def test_autotune_records_one_choice_per_shape(monkeypatch):
    monkeypatch.setattr(conv_cpu, "_CHOICE", {})
    x, w, g = inputs(2, 8, 7, 12, torch.bfloat16, seed=1)
    w = w.requires_grad_()
    conv_cpu.Conv3x3.apply(x, w).backward(g)
    assert list(conv_cpu._CHOICE.values())[0] in conv_cpu.WGRAD_METHODS
    assert len(conv_cpu.chosen_methods()) == 1


def test_conv_group_cpu_matches_reference_group():
    from dawnbench_fast.models.layers import ConvGroup, conv_group

    torch.manual_seed(3)
    grp = ConvGroup(5, 12)
    x = torch.randn(4, 5, 11, 11)
    ref_out = conv_group(grp, x)
    ref_out.sum().backward()
    ref_grads = [p.grad.clone() for p in grp.parameters() if p.requires_grad]
    grp.zero_grad()
    out = conv_cpu.conv_group_cpu(grp, x)
    out.sum().backward()
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
    for a, b in zip([p.grad for p in grp.parameters() if p.requires_grad], ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
