"""The cpu backend's weight gradient for a conv before a 2x2 max-pool
(csrc/conv_group_wgrad_pooled_cpu.cpp through csrc/conv_group_wgrad.py) against aten's
convolution_backward in float64 on the same bf16 values, its fallback to the
dense kernel, and its place in the conv group.

dY is a real max-pool gradient: a pool's random upstream gradient scattered
to the argmax of each 2x2 window (max_unpool2d), so odd maps keep their last
row and column at zero, as in the net's 31x31 and 7x7 maps.

Shapes: odd batches and maps, 2x2 and 3x2 maps (one window), input channels
off the 16-channel planes (5, 13, 24), output channels multiples of 16 but
not of 32 (48, 80), and batches of several chunks with a shorter last one
(whose fp32 planes are laid out anew in the same scratch).

Tolerance, per element: fp32 sums of exact bf16 x bf16 products, rounded to
bf16 once: |got - ref| <= 2^-8 |ref| + 2^-16 sum|products|, as for the dense
kernel (tests/ops/test_conv_group_wgrad.py).
"""

from __future__ import annotations

import zlib

import pytest
import torch
import torch.nn.functional as F
from support.poison import poison_new_output
from support.pool_grads import channels_last, pool_grad
from support.wgrad_cases import reference

from dawnbench_fast.csrc import conv_group, conv_group_wgrad

pytestmark = pytest.mark.skipif(not conv_group_wgrad.supported(),
                                reason="needs the C++ build and a CPU with AVX-512 BF16")

# (N, Cin, Cout, H, W)
SHAPES = [(3, 5, 16, 7, 9), (2, 24, 48, 31, 31), (1, 3, 16, 2, 2), (2, 7, 16, 3, 2),
          (4, 256, 32, 7, 7), (40, 64, 32, 15, 15), (9, 24, 32, 31, 31), (5, 13, 80, 6, 5)]


def pooled_inputs(n, cin, cout, h, w, seed):
    """x, a 2x2 max-pool's dY (one nonzero per window and channel), w: bf16."""
    gen = torch.Generator().manual_seed(seed)
    x = channels_last(torch.randn(n, cin, h, w, generator=gen).bfloat16())
    g = pool_grad(n, cout, h, w, gen)
    wt = (torch.randn(cout, cin, 3, 3, generator=gen) / (3 * cin**0.5)).bfloat16()
    return x, g, wt


def assert_within_bound(got, x, g, w):
    want, magnitude = reference(x, g, w)
    err = (got.double() - want).abs()
    worst = (err / (2.0**-8 * want.abs() + 2.0**-16 * magnitude + 1e-30)).max().item()
    assert worst <= 1.0, f"error {worst:.2f}x the bound"


@pytest.fixture
def poisoned(monkeypatch):
    """The fp32 dW the wrapper allocates starts as NaN."""
    poison_new_output(monkeypatch, conv_group_wgrad)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_pooled_wgrad_matches_aten_in_float64(shape, poisoned):
    x, g, w = pooled_inputs(*shape, seed=zlib.crc32(repr(shape).encode()))
    got = conv_group_wgrad.conv3x3_wgrad_pooled(x, g, w)
    assert got.shape == w.shape and got.dtype == torch.bfloat16 and got.is_contiguous()
    assert_within_bound(got, x, g, w)


def test_pooled_wgrad_is_the_same_on_any_thread_count():
    """Each thread owns whole output channels and sums in one order."""
    x, g, w = pooled_inputs(6, 24, 64, 15, 15, seed=21)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = conv_group_wgrad.conv3x3_wgrad_pooled(x, g, w)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, conv_group_wgrad.conv3x3_wgrad_pooled(x, g, w))


@pytest.mark.parametrize("where", ["two in a window", "outside the windows", "dense"])
def test_not_a_pool_gradient_falls_back_to_the_dense_kernel(where):
    """A dY that is not a 2x2 max-pool's gradient gets the dense kernel's
    result, bit for bit, never a sum over one value per window."""
    x, g, w = pooled_inputs(3, 8, 32, 7, 7, seed=4)
    g = g.clone()
    if where == "two in a window":
        g[1, 5, 2:4, 2:4] = 0.5  # all four of one window, one channel
    elif where == "outside the windows":
        g[2, 7, 6, 3] = 0.25  # the odd map's last row belongs to no window
    else:
        g = channels_last(torch.randn_like(g, dtype=torch.float32).bfloat16())
    got = conv_group_wgrad.conv3x3_wgrad_pooled(x, g, w)
    assert torch.equal(got, conv_group_wgrad.conv3x3_wgrad(x, g, w))
    assert_within_bound(got, x, g, w)


def test_the_default_runs_it_before_a_pool_and_a_forced_method_does_not(monkeypatch):
    """Conv3x3 with before_pool: the default policy takes the variant (listed
    apart in chosen_methods) and dW matches the float64 reference of the pool's
    own dY; DAWNBENCH_WGRAD=dpbf16 runs the dense kernel as named."""
    monkeypatch.setattr(conv_group, "_CHOICE", {})
    monkeypatch.setattr(conv_group, "_BEFORE_POOL_RAN", set())
    monkeypatch.setattr(conv_group_wgrad, "onednn_has_amx", lambda: False)
    monkeypatch.delenv("DAWNBENCH_WGRAD", raising=False)
    x, _, w = pooled_inputs(4, 24, 32, 9, 9, seed=9)
    upstream = torch.randn(4, 32, 4, 4, generator=torch.Generator().manual_seed(1)).bfloat16()

    def grads():
        w1 = w.clone().requires_grad_()
        y = conv_group.Conv3x3.apply(x, w1, True)
        (dy,) = torch.autograd.grad(F.max_pool2d(y, 2), y, upstream, retain_graph=True)
        F.max_pool2d(y, 2).backward(upstream)
        return w1.grad, channels_last(dy)

    got, dy = grads()
    name = f"x{list(x.shape)} w{list(w.shape)} bfloat16"
    assert conv_group.chosen_methods() == {name: "dpbf16", f"{name} before 2x2 max-pool": "dpbf16_pooled"}
    assert_within_bound(got, x, dy, w)
    assert torch.equal(got, conv_group_wgrad.conv3x3_wgrad_pooled(x, dy, w))
    monkeypatch.setattr(conv_group, "_CHOICE", {})
    monkeypatch.setattr(conv_group, "_BEFORE_POOL_RAN", set())
    monkeypatch.setenv("DAWNBENCH_WGRAD", "dpbf16")
    forced, _ = grads()
    assert conv_group.chosen_methods() == {name: "dpbf16"}
    assert torch.equal(forced, conv_group_wgrad.conv3x3_wgrad(x, dy, w))
