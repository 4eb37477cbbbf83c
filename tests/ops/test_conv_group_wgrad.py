"""The cpu backend's AVX-512 BF16 3x3 conv weight gradient
(csrc/conv_group_wgrad_cpu.cpp through csrc/conv_group_wgrad.py) against aten's
convolution_backward in float64 on the same bf16 values, and its place as the
conv group's default weight-gradient method.

Shapes: odd batches (the last image pair half empty), input channels that are
not multiples of the 6-channel tile, output channels that are multiples of 16
but not of the 64-channel tile, non-square maps, 1x1 and 2x2 maps (where some
taps reach no pixel at all), and one batch large enough for several chunks.

Tolerance, per element: the kernel sums bf16 products in fp32 and rounds the
result to bf16 once, so |got - ref| <= 2^-8 |ref| (the final rounding) plus
2^-16 times the sum of |products| (fp32 summation, generous for these sizes).
"""

from __future__ import annotations

import zlib

import pytest
import torch
from support.wgrad_cases import error_over_bound, inputs

from dawnbench_fast.csrc import conv_group, conv_group_wgrad

pytestmark = pytest.mark.skipif(not conv_group_wgrad.supported(),
                                reason="needs the C++ build and a CPU with AVX-512 BF16")

# (N, Cin, Cout, H, W)
SHAPES = [(3, 5, 16, 7, 9), (1, 24, 48, 1, 1), (2, 13, 80, 2, 3), (17, 13, 80, 16, 16),
          (4, 64, 64, 3, 3), (6, 7, 144, 5, 4)]


@pytest.fixture
def poisoned(monkeypatch):
    """Every buffer the wrapper allocates (workspaces, the fp32 dW) starts as
    NaN, so a kernel that reads before it writes fails."""
    real = conv_group_wgrad.new_output

    def nan_output(*args, **kwargs):
        return real(*args, **kwargs).fill_(float("nan"))
    monkeypatch.setattr(conv_group_wgrad, "new_output", nan_output)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_wgrad_matches_aten_in_float64(shape, poisoned):
    x, g, w = inputs(*shape, seed=zlib.crc32(repr(shape).encode()))
    got = conv_group_wgrad.conv3x3_wgrad(x, g, w)
    assert got.shape == w.shape and got.dtype == torch.bfloat16 and got.is_contiguous()
    worst = error_over_bound(got, x, g, w)
    assert worst <= 1.0, f"error {worst:.2f}x the bound"


def test_wgrad_takes_nchw_inputs_and_is_deterministic():
    x, g, w = inputs(5, 9, 32, 6, 6, seed=11)
    first = conv_group_wgrad.conv3x3_wgrad(x, g, w)
    assert torch.equal(first, conv_group_wgrad.conv3x3_wgrad(x, g, w))  # fixed summation order
    assert torch.equal(first, conv_group_wgrad.conv3x3_wgrad(x.contiguous(), g.contiguous(), w))


@pytest.mark.parametrize("case", ["fp32", "cout 24", "dY shape"])
def test_wgrad_refuses_what_it_does_not_take_in_one_line(case):
    x, g, w = inputs(2, 4, 32, 5, 5, seed=3)
    if case == "fp32":
        x, g, w = x.float(), g.float(), w.float()
    elif case == "cout 24":
        w, g = w[:24], g[:, :24]
    else:
        g = g[:, :, :4]
    with pytest.raises(ValueError) as info:
        conv_group_wgrad.conv3x3_wgrad(x, g, w)
    assert "\n" not in str(info.value) and "conv3x3_wgrad" in str(info.value)


def test_conv_group_default_is_dpbf16_where_it_applies(monkeypatch):
    """Without AMX, bf16 with output channels a multiple of 16 takes the kernel;
    fp32, or 12 channels, keep aten; the choice is recorded with its source, and
    the autograd Function's dW matches conv2d's float64 autograd."""
    monkeypatch.setattr(conv_group, "_CHOICE", {})
    monkeypatch.setattr(conv_group_wgrad, "onednn_has_amx", lambda: False)
    monkeypatch.delenv("DAWNBENCH_WGRAD", raising=False)
    x, g, w = inputs(4, 6, 32, 8, 8, seed=5)
    assert conv_group.default_method(x, w) == "dpbf16"
    assert conv_group.default_method(x.float(), w.float()) == "aten"
    assert conv_group.default_method(x, w[:12]) == "aten"
    w1 = w.clone().requires_grad_()
    conv_group.Conv3x3.apply(x, w1).backward(g)
    assert conv_group.chosen_methods() == {f"x{list(x.shape)} w{list(w.shape)} bfloat16": "dpbf16"}
    assert next(iter(conv_group.wgrad_decisions().values()))["source"] == "default"
    assert error_over_bound(w1.grad, x, g, w) <= 1.0


def test_forcing_dpbf16_where_it_cannot_run_is_a_one_line_error(monkeypatch):
    """A CPU without AVX-512 BF16 (or no C++ build): forced, the kernel refuses
    in one line naming what it needs; the default never picks it there."""
    monkeypatch.setattr(conv_group, "_CHOICE", {})
    monkeypatch.setattr(conv_group_wgrad, "supported", lambda: False)
    monkeypatch.setattr(conv_group_wgrad, "amx_supported", lambda: False)  # nor AMX tiles
    x, g, w = inputs(2, 4, 16, 5, 5, seed=8)
    assert conv_group.default_method(x, w) == "aten"
    monkeypatch.setenv("DAWNBENCH_WGRAD", "dpbf16")
    with pytest.raises(ValueError, match="AVX-512 BF16") as info:
        conv_group.Conv3x3.apply(x, w.clone().requires_grad_()).backward(g)
    assert "\n" not in str(info.value)


def test_default_keeps_onednn_where_it_has_amx(monkeypatch):
    """With AMX tiles oneDNN's weight gradient is the faster one, so the default
    keeps aten there; forcing dpbf16 still runs the kernel."""
    monkeypatch.setattr(conv_group, "_CHOICE", {})
    monkeypatch.setattr(conv_group_wgrad, "onednn_has_amx", lambda: True)
    monkeypatch.delenv("DAWNBENCH_WGRAD", raising=False)
    x, g, w = inputs(4, 6, 32, 8, 8, seed=6)
    assert conv_group.default_method(x, w) == "aten"
    monkeypatch.setenv("DAWNBENCH_WGRAD", "dpbf16")
    w1 = w.clone().requires_grad_()
    conv_group.Conv3x3.apply(x, w1).backward(g)
    assert conv_group.chosen_methods() == {f"x{list(x.shape)} w{list(w.shape)} bfloat16": "dpbf16"}


@pytest.mark.parametrize("isa, has", [("AVX512_CORE_BF16", False), ("avx512_core_amx", True), ("ALL", True)])
def test_onednn_has_amx_follows_the_isa_cap(monkeypatch, isa, has):
    """ONEDNN_MAX_CPU_ISA below AMX means no tiles, whatever the CPU has."""
    onednn_has_amx = conv_group_wgrad.onednn_has_amx.__wrapped__
    monkeypatch.setattr(conv_group_wgrad, "cpu_flags", lambda: {"avx512_bf16", "amx_bf16"})
    monkeypatch.setattr(torch._C._cpu, "_init_amx", lambda: True, raising=False)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", isa)
    assert onednn_has_amx() is has
    monkeypatch.setattr(conv_group_wgrad, "cpu_flags", lambda: {"avx512_bf16"})
    assert onednn_has_amx() is False
