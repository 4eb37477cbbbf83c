"""The cpu backend's data gradient for a conv before a 2x2 max-pool
(csrc/conv_group_dgrad_pooled_cpu.cpp through csrc/conv_group_dgrad.py)
against aten's convolution_backward in float64 on the same bf16 values, in
both of its forms (vdpbf16ps pairs where the CPU has AVX-512 BF16, fp32
FMAs) and on both copies of the portable build (whose FMA forms give the
same bits), its fallback to oneDNN's dense data gradient, and its switch in
the conv group.

dY is a real max-pool gradient: a pool's random upstream gradient scattered
to the argmax of each 2x2 window (max_unpool2d), so odd maps keep their last
row and column at zero, as in the net's 31x31, 15x15 and 7x7 maps.

Shapes: batches of 1 and 3, odd and non-square maps, 2x2 and 3x2 maps (one
window: every tap of the 3x3 reaches the border), input channels off the
16-channel blocks (3, 5, 13, 17: a last block of one lane), output channels
off the 32-channel chunks (7, 20, 33, 40), the net's 64->256 @15 and
256->256 @7, and 19 small images (the kernel takes at most 16 images a group:
a last group of 3).

Tolerance, per element: bf16 dY and w only (the op's one dtype); fp32 sums
of exact bf16 x bf16 products, rounded to bf16 once: |got - ref| <= 2^-8
|ref| + 2^-16 sum|products|, as for the weight gradients.
"""

from __future__ import annotations

import zlib
from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F
from support.poison import poison_new_output
from support.pool_grads import channels_last, pool_grad

from dawnbench_fast.csrc import conv_group, conv_group_dgrad, native

pytestmark = pytest.mark.skipif(not conv_group_dgrad.supported(), reason="needs the C++ build")

# (N, Cin, Cout, H, W)
SHAPES = [(1, 5, 16, 7, 9), (3, 24, 48, 31, 31), (1, 3, 7, 2, 2), (3, 7, 20, 3, 2),
          (1, 13, 40, 6, 5), (3, 17, 33, 8, 8), (2, 64, 256, 15, 15), (3, 256, 256, 7, 7),
          (19, 5, 16, 5, 4)]  # more images than a group holds (16): a last group of 3


def pooled_inputs(n, cin, cout, h, w, seed):
    """A 2x2 max-pool's dY (one nonzero per window and channel) and w: bf16."""
    gen = torch.Generator().manual_seed(seed)
    g = pool_grad(n, cout, h, w, gen)
    wt = (torch.randn(cout, cin, 3, 3, generator=gen) / (3 * cout**0.5)).bfloat16()
    return g, wt


def reference(g, w):
    """(dX, sum of |products|) in float64."""
    def dgrad(b, a):
        x = b.new_empty((b.shape[0], a.shape[1], *b.shape[2:]))
        return torch.ops.aten.convolution_backward(
            b, x, a, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, False, False])[0]
    return dgrad(g.double(), w.double()), dgrad(g.double().abs(), w.double().abs())


def assert_within_bound(got, g, w):
    want, magnitude = reference(g, w)
    err = (got.double() - want).abs()
    worst = (err / (2.0**-8 * want.abs() + 2.0**-16 * magnitude + 1e-30)).max().item()
    assert worst <= 1.0, f"error {worst:.2f}x the bound"


def copies() -> list[str]:
    """The build's CPU copies this CPU runs (the AVX-512 one and the baseline one)."""
    runs = dict(native.load().cpu_paths()) if conv_group_dgrad.supported() else {}
    return [name for name, ok in runs.items() if ok]


@contextmanager
def cpu_copy(name: str):
    mod = native.load()
    was = mod.cpu_path()
    mod.set_cpu_path(name)
    try:
        yield
    finally:
        mod.set_cpu_path(was)


@pytest.fixture
def poisoned(monkeypatch):
    """The dX the wrapper allocates starts as NaN."""
    poison_new_output(monkeypatch, conv_group_dgrad)


FORMS = {"pairs": True, "fma": False}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("copy", copies())
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_pooled_dgrad_matches_aten_in_float64(shape, copy, form, poisoned):
    """Fresh inputs for every shape; the pairs run where the copy and CPU
    have AVX-512 BF16 (the baseline copy runs the FMA form either way)."""
    g, w = pooled_inputs(*shape, seed=zlib.crc32(repr((shape, form)).encode()))
    with cpu_copy(copy):
        got = conv_group_dgrad.conv3x3_dgrad_pooled(g, w, FORMS[form])
    n, cin, _, h, wd = shape
    assert got.shape == (n, cin, h, wd) and got.dtype == torch.bfloat16
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert_within_bound(got, g, w)


def test_both_copies_give_the_same_bits():
    """bf16 x bf16 products are exact in fp32, so the baseline copy's multiply
    then add rounds as the AVX-512 copy's FMA, in the same order."""
    if not {"avx512", "baseline"} <= set(copies()):
        pytest.skip(f"needs the portable build's two copies on an AVX-512 CPU (have {copies()})")
    g, w = pooled_inputs(3, 17, 33, 9, 8, seed=5)
    with cpu_copy("baseline"):
        baseline = conv_group_dgrad.conv3x3_dgrad_pooled(g, w, pairs=False)
    with cpu_copy("avx512"):
        assert torch.equal(conv_group_dgrad.conv3x3_dgrad_pooled(g, w, pairs=False), baseline)


@pytest.mark.parametrize("form", FORMS)
def test_the_same_bits_on_every_run_and_thread_count(form):
    """Threads split the images; each element sums in one order."""
    g, w = pooled_inputs(5, 64, 96, 15, 15, seed=21)
    first = conv_group_dgrad.conv3x3_dgrad_pooled(g, w, FORMS[form])
    assert torch.equal(first, conv_group_dgrad.conv3x3_dgrad_pooled(g, w, FORMS[form]))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = conv_group_dgrad.conv3x3_dgrad_pooled(g, w, FORMS[form])
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, first)


def test_the_pair_form_runs_where_the_cpu_has_it():
    """Which form ran shows in a sum of denormal products: vdpbf16ps flushes
    them (its DAZ/FTZ), an FMA keeps them. Sixteen products of 2^-130 make
    2^-126 with FMAs and 0 in pairs; pairs=False is always the FMA form."""
    g = torch.zeros(1, 16, 4, 4)
    g[0, :, 0, 0] = 2.0**-65  # one nonzero per channel, at code 0 of the first window
    g = channels_last(g.bfloat16())
    w = torch.full((16, 16, 3, 3), 2.0**-65).bfloat16()
    fma = conv_group_dgrad.conv3x3_dgrad_pooled(g, w, pairs=False)
    assert torch.equal(fma[0, :, :2, :2].float(), torch.full((16, 2, 2), 2.0**-126))
    pairs = conv_group_dgrad.conv3x3_dgrad_pooled(g, w, pairs=True)
    if conv_group_dgrad.pairs_supported():
        assert not pairs.any()
        assert conv_group_dgrad.form_of("pooled") == "pooled"
    else:
        assert torch.equal(pairs, fma)
        assert conv_group_dgrad.form_of("pooled") == "pooled-fma"
    assert conv_group_dgrad.form_of("pooled-fma") == "pooled-fma"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("where", ["two in a window", "outside the windows", "dense"])
def test_not_a_pool_gradient_falls_back_to_the_dense_gradient(where, form):
    """A dY that is not a 2x2 max-pool's gradient gets oneDNN's dense result,
    bit for bit, never a sum over one value per window."""
    g, w = pooled_inputs(3, 8, 40, 7, 7, seed=4)
    g = g.clone()
    if where == "two in a window":
        g[1, 35, 2:4, 2:4] = 0.5  # all four of one window, in the second chunk
    elif where == "outside the windows":
        g[2, 7, 6, 3] = 0.25  # the odd map's last row belongs to no window
    else:
        g = channels_last(torch.randn_like(g, dtype=torch.float32).bfloat16())
    got = conv_group_dgrad.conv3x3_dgrad_pooled(g, w, FORMS[form])
    x = g.new_empty((3, 8, 7, 7)).contiguous(memory_format=torch.channels_last)
    assert torch.equal(got, conv_group_dgrad.dgrad_aten(g, x, w))
    assert_within_bound(got, g, w)


def test_what_it_does_not_take_is_a_one_line_error():
    g, w = pooled_inputs(1, 4, 16, 4, 4, seed=1)
    with pytest.raises(ValueError, match="bf16 CPU dY"):
        conv_group_dgrad.conv3x3_dgrad_pooled(g.float(), w.float())
    with pytest.raises(ValueError, match="bf16 CPU dY"):
        conv_group_dgrad.conv3x3_dgrad_pooled(g[:, :, :1], w)


def test_the_default_runs_it_before_a_pool_and_aten_opts_out(monkeypatch):
    """Conv3x3 with before_pool: the kernel's dX by default (listed in
    chosen_methods), oneDNN's dense one (unlisted) under DAWNBENCH_DGRAD=aten;
    the conv after the pool keeps oneDNN's either way."""
    monkeypatch.setattr(conv_group, "_CHOICE", {})
    monkeypatch.setattr(conv_group, "_BEFORE_POOL_RAN", set())
    monkeypatch.setattr(conv_group_dgrad, "RAN", {})
    monkeypatch.setattr(conv_group_dgrad, "_METHOD", [])
    monkeypatch.delenv("DAWNBENCH_DGRAD", raising=False)
    monkeypatch.setattr(conv_group_dgrad, "onednn_has_amx", lambda: False)  # the Zen-class default
    gen = torch.Generator().manual_seed(3)
    x = channels_last(torch.randn(3, 24, 9, 9, generator=gen).bfloat16())
    w = (torch.randn(32, 24, 3, 3, generator=gen) / 9).bfloat16()
    upstream = torch.randn(3, 32, 4, 4, generator=gen).bfloat16()

    def grads(before_pool):
        x1 = x.clone().requires_grad_()
        y = conv_group.Conv3x3.apply(x1, w, before_pool)
        (dy,) = torch.autograd.grad(F.max_pool2d(y, 2), y, upstream, retain_graph=True)
        F.max_pool2d(y, 2).backward(upstream)
        return x1.grad, channels_last(dy)

    assert conv_group_dgrad.dgrad_method() == "pooled"
    got, dy = grads(True)
    assert torch.equal(got, conv_group_dgrad.conv3x3_dgrad_pooled(dy, w))
    assert_within_bound(got, dy, w)
    name = "x[3, 24, 9, 9] w[32, 24, 3, 3] bfloat16 before 2x2 max-pool, data gradient"
    assert conv_group.chosen_methods()[name] == conv_group_dgrad.form_of("pooled")
    monkeypatch.setenv("DAWNBENCH_DGRAD", "pooled-fma")
    fma, _ = grads(True)
    assert torch.equal(fma, conv_group_dgrad.conv3x3_dgrad_pooled(dy, w, pairs=False))
    assert conv_group.chosen_methods()[name] == "pooled-fma"
    monkeypatch.delenv("DAWNBENCH_DGRAD")
    monkeypatch.setattr(conv_group_dgrad, "RAN", {})
    after_pool, _ = grads(False)
    assert torch.equal(after_pool, conv_group_dgrad.dgrad_aten(dy, x, w))
    assert not conv_group_dgrad.RAN
    monkeypatch.setenv("DAWNBENCH_DGRAD", "aten")
    dense, _ = grads(True)
    assert torch.equal(dense, conv_group_dgrad.dgrad_aten(dy, x, w))
    assert not conv_group_dgrad.RAN and not any("data gradient" in k for k in conv_group.chosen_methods())
    monkeypatch.delenv("DAWNBENCH_DGRAD")
    conv_group_dgrad.set_dgrad_method("aten")
    assert conv_group_dgrad.dgrad_method() == "aten"
    with pytest.raises(ValueError, match="DAWNBENCH_DGRAD must be one of"):
        conv_group_dgrad.set_dgrad_method(None)
        monkeypatch.setenv("DAWNBENCH_DGRAD", "fast")
        conv_group_dgrad.dgrad_method()


@pytest.mark.parametrize("amx", [False, True])
def test_the_default_method_is_onednns_where_it_has_amx(amx, monkeypatch):
    monkeypatch.setattr(conv_group_dgrad, "_METHOD", [])
    monkeypatch.delenv("DAWNBENCH_DGRAD", raising=False)
    monkeypatch.setattr(conv_group_dgrad, "onednn_has_amx", lambda: amx)
    assert conv_group_dgrad.dgrad_method() == ("aten" if amx else "pooled")
    monkeypatch.setenv("DAWNBENCH_DGRAD", "pooled")  # asked for, it runs on any machine
    assert conv_group_dgrad.dgrad_method() == "pooled"


def test_the_cost_counts_the_products_it_computes():
    """9 taps x I channels per window and output channel: a quarter of the
    dense data gradient's count on an even map; on an odd one the last row
    and column (no window) are not counted; bytes read dY and w, write dX."""
    from torch.utils.flop_counter import FlopCounterMode

    from dawnbench_fast.csrc.conv_group_costs import conv3x3_dgrad_pooled_cost

    def counted(fn):
        with FlopCounterMode(display=False) as counter:
            fn()
        return counter.get_total_flops()

    g, w = pooled_inputs(3, 5, 16, 8, 6, seed=2)
    x = g.new_empty((3, 5, 8, 6))
    ours = counted(lambda: conv_group_dgrad.conv3x3_dgrad_pooled(g, w))
    assert ours == 2 * 3 * 4 * 3 * 16 * 9 * 5
    assert 4 * ours == counted(lambda: conv_group_dgrad.dgrad_aten(g, x, w))
    flops, nbytes = conv3x3_dgrad_pooled_cost([[3, 16, 7, 9], [16, 5, 3, 3]], ["c10::BFloat16"] * 2)
    assert flops == 2 * 3 * 3 * 4 * 16 * 9 * 5
    assert nbytes == 2 * (3 * 16 * 7 * 9 + 16 * 5 * 9 + 3 * 5 * 7 * 9)
