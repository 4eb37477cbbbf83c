"""The cpu backend's Intel AMX 3x3 conv weight gradient
(csrc/conv_group_wgrad_amx_cpu.cpp through csrc/conv_group_wgrad.py) against
aten's convolution_backward in float64 on the same bf16 values, and its place
as the conv group's default on small maps where the CPU has AMX tiles.

Runs where the CPU and OS give AMX tiles (a Xeon since Sapphire Rapids);
elsewhere the kernel tests skip and the choice tests run with the support
check stood in.

Shapes: odd batches; channel counts that are not multiples of the 32-channel
blocks, odd ones on the transposed operand (the smaller channel count: dY in
one orientation, x in the other); non-square maps, 1x1 and 2x3 maps (taps
that reach no pixel); a batch spanning several 1024-row chunks.

Tolerance: tests/support/wgrad_cases.py's bound (bf16 products summed in
fp32, rounded to bf16 once), as for the dpbf16 kernel.
"""

from __future__ import annotations

import zlib

import pytest
import torch
from support.wgrad_cases import error_over_bound, inputs

from dawnbench_fast.csrc import conv_group, conv_group_wgrad

needs_amx = pytest.mark.skipif(not conv_group_wgrad.amx_supported(),
                               reason="needs the C++ build and a CPU and OS with AMX tiles")

# (N, Cin, Cout, H, W): Cout <= Cin transposes dY, Cin < Cout transposes x.
SHAPES = [(3, 5, 16, 7, 9), (1, 24, 48, 1, 1), (2, 13, 80, 2, 3), (17, 13, 80, 16, 16),
          (4, 64, 64, 3, 3), (6, 33, 17, 5, 4), (5, 40, 24, 7, 7)]


def assert_close(got, x, g, w):
    assert got.shape == w.shape and got.dtype == torch.bfloat16 and got.is_contiguous()
    worst = error_over_bound(got, x, g, w)
    assert worst <= 1.0, f"error {worst:.2f}x the bound"


@pytest.fixture
def poisoned(monkeypatch):
    """The fp32 dW the wrapper allocates starts as NaN, so a kernel that skips
    an element fails."""
    real = conv_group_wgrad.new_output

    def nan_output(*args, **kwargs):
        return real(*args, **kwargs).fill_(float("nan"))
    monkeypatch.setattr(conv_group_wgrad, "new_output", nan_output)


@needs_amx
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_amx_wgrad_matches_aten_in_float64(shape, poisoned):
    x, g, w = inputs(*shape, seed=zlib.crc32(repr(shape).encode()))
    assert_close(conv_group_wgrad.conv3x3_wgrad_amx(x, g, w), x, g, w)


@needs_amx
def test_amx_wgrad_workspaces_carry_nothing_between_calls(poisoned):
    """The kernel keeps its workspaces across calls: a call after a larger one
    (other channel counts, large values left behind) still gives its own dW,
    the same bits every time and from NCHW inputs."""
    big = inputs(9, 70, 96, 9, 11, seed=21)
    conv_group_wgrad.conv3x3_wgrad_amx(big[0] * 64, big[1] * 64, big[2])
    x, g, w = inputs(3, 9, 32, 6, 5, seed=22)
    first = conv_group_wgrad.conv3x3_wgrad_amx(x, g, w)
    assert_close(first, x, g, w)
    assert torch.equal(first, conv_group_wgrad.conv3x3_wgrad_amx(x, g, w))
    assert torch.equal(first, conv_group_wgrad.conv3x3_wgrad_amx(x.contiguous(), g.contiguous(), w))


@needs_amx
@pytest.mark.parametrize("case", ["fp32", "dY shape"])
def test_amx_wgrad_refuses_what_it_does_not_take_in_one_line(case):
    x, g, w = inputs(2, 8, 32, 5, 5, seed=23)
    if case == "fp32":
        x, g, w = x.float(), g.float(), w.float()
    else:
        g = g[:, :, :4]
    with pytest.raises(ValueError) as info:
        conv_group_wgrad.conv3x3_wgrad_amx(x, g, w)
    assert "\n" not in str(info.value) and "conv3x3_wgrad_amx" in str(info.value)


@pytest.mark.parametrize("amx", [False, True])
def test_default_takes_amx_on_small_maps_where_the_cpu_has_tiles(amx, monkeypatch):
    """With AMX tiles the default runs the kernel on maps of at most
    AMX_KERNEL_MAX_PIXELS and oneDNN's weight gradient on larger ones (oneDNN
    has AMX there too); without, the rules before it (im2col on 3x3 maps where
    oneDNN has AMX, dpbf16 elsewhere) are unchanged."""
    monkeypatch.setattr(conv_group_wgrad, "amx_supported", lambda: amx)
    monkeypatch.setattr(conv_group_wgrad, "onednn_has_amx", lambda: True)
    small, _, w = inputs(2, 8, 32, 7, 7, seed=24)
    tiny, _, _ = inputs(2, 8, 32, 3, 3, seed=24)
    large, _, _ = inputs(2, 8, 32, 8, 8, seed=24)
    assert small.shape[2] * small.shape[3] <= conv_group_wgrad.AMX_KERNEL_MAX_PIXELS
    assert large.shape[2] * large.shape[3] > conv_group_wgrad.AMX_KERNEL_MAX_PIXELS
    assert conv_group.default_method(small, w) == ("amx" if amx else "aten")
    assert conv_group.default_method(tiny, w) == ("amx" if amx else "im2col")
    assert conv_group.default_method(large, w) == "aten"
    assert conv_group.default_method(small.float(), w.float()) == "aten"  # bf16 only


@needs_amx
def test_conv_group_backward_runs_amx_by_default(monkeypatch):
    """Through the conv group's autograd Function: the default records amx for
    a 7x7 map and its dW matches conv2d's float64 gradient."""
    monkeypatch.setattr(conv_group, "_CHOICE", {})
    monkeypatch.delenv("DAWNBENCH_WGRAD", raising=False)
    x, g, w = inputs(4, 16, 32, 7, 7, seed=25)
    w1 = w.clone().requires_grad_()
    conv_group.Conv3x3.apply(x, w1).backward(g)
    assert conv_group.chosen_methods() == {f"x{list(x.shape)} w{list(w.shape)} bfloat16": "amx"}
    assert_close(w1.grad, x, g, w)


def test_forcing_amx_without_tiles_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(conv_group, "_CHOICE", {})
    monkeypatch.setattr(conv_group_wgrad, "amx_supported", lambda: False)
    monkeypatch.setenv("DAWNBENCH_WGRAD", "amx")
    x, g, w = inputs(2, 4, 16, 5, 5, seed=26)
    with pytest.raises(ValueError, match="AMX") as info:
        conv_group.Conv3x3.apply(x, w.clone().requires_grad_()).backward(g)
    assert "\n" not in str(info.value)
