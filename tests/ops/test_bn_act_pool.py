"""The cpu backend's fused memory-bound passes (csrc/bn_act_pool_cpu.cpp):
``pool_bn_act`` (2x2 max-pool + BN + act, csrc/bn_act.py) and the
vectorised NHWC loops behind ``bn_act`` on channels_last fp32/bf16.

Two kinds of check, fresh random inputs, outputs poisoned with NaN (codes
with 255) before each call, odd channel counts (not multiples of 16 lanes)
and odd H/W (the floor-mode pool leaves a row/column without gradient):
- against the PyTorch reference ``bn_act(max_pool2d(x, 2))`` within the
  precision used: fp32 1e-5 relative-to-scale (our erf is a 1.5e-7
  approximation, torch's is libm's), bf16 one bf16 rounding (2^-8) of the
  fp32 reference computed on the same bf16 input;
- bit for bit against the unfused csrc path (ATen's max-pool, then bn_act with
  the old loops), which the fused kernels must reproduce exactly (same tie rule,
  summation order and element math), and against themselves on repeat and
  with another thread count.
"""

from __future__ import annotations

import copy
import subprocess

import pytest
import torch
import torch.nn.functional as F

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import bn_act as csrc_bn_act
from dawnbench_fast.csrc import build, conv_group, native
from dawnbench_fast.models.layers import BatchNorm, ConvGroup

reference_bn_act = dispatch.reference("bn_act")
pytestmark = [pytest.mark.skipif(native.unavailable_reason() is not None,
                                 reason=f"no C++ build: {native.unavailable_reason()}"),
              pytest.mark.usefixtures("seed_from_test_id")]
SHAPES = [(3, 13, 7, 9), (2, 70, 6, 5), (4, 24, 31, 31)]  # the last one runs the OpenMP path


_NEW_OUTPUT, _CODES = csrc_bn_act.new_output, csrc_bn_act._codes


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    """Every output the ops allocate starts as NaN (codes as 255)."""
    def nan_output(*a, **k):
        return _NEW_OUTPUT(*a, **k).fill_(float("nan"))

    monkeypatch.setattr(csrc_bn_act, "new_output", nan_output)
    monkeypatch.setattr(csrc_bn_act, "_codes", lambda *a: _CODES(*a).fill_(255))


class _Loops:
    """Run a block with the extension's NHWC bn_act loops on (new) or off (old)."""

    def __init__(self, on: bool):
        self.on = on

    def __enter__(self):
        self.mod = native.load()
        self.was = self.mod.nhwc_kernels_enabled()
        self.mod.set_nhwc_kernels_enabled(self.on)

    def __exit__(self, *exc):
        self.mod.set_nhwc_kernels_enabled(self.was)


@pytest.fixture
def old_loops():
    return _Loops(False)


def _bn(c, training):
    bn = BatchNorm(c)
    with torch.no_grad():
        bn.bias.normal_()
        bn.weight.uniform_(0.5, 1.5)
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2)
    bn.weight.requires_grad_(True)
    return bn.train(training)


def _input(shape, dtype, ties=False):
    x = torch.randn(shape) * 2 + 0.3
    if ties:  # few distinct values: equal maxima inside windows
        x = (x * 4).round() / 4
    return x.to(dtype).contiguous(memory_format=torch.channels_last).requires_grad_(True)


def _run(fn, x, bn, act, dy=None):
    """y, dx, dweight, dbias, running mean, running var of act(bn(...)) with fn."""
    x = x.detach().clone().requires_grad_(True)
    bn = copy.deepcopy(bn)
    y = fn(x, bn, act)
    if dy is None:
        dy = torch.randn(y.shape).to(y.dtype)
    if bn.training:
        y.backward(dy)
        return y, dy, x.grad, bn.weight.grad, bn.bias.grad, bn.running_mean, bn.running_var
    return y, dy


def _fused(x, bn, act):
    return csrc_bn_act.pool_bn_act(x, bn, act)


def _unfused(x, bn, act):
    return csrc_bn_act.bn_act(F.max_pool2d(x, 2), bn, act)


def _reference(x, bn, act):
    return reference_bn_act(F.max_pool2d(x, 2), bn, act)


def _close(got, want, rel):
    scale = want.float().abs().max().clamp_min(1e-6)
    err = (got.float() - want.float()).abs().max()
    assert torch.isfinite(got.float()).all()
    assert err <= rel * scale, f"max error {err:.3g} vs scale {scale:.3g}"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("act", ["gelu", "relu"])
@pytest.mark.parametrize("training", [True, False])
def test_pool_bn_act_matches_reference(shape, dtype, act, training):
    x, bn = _input(shape, dtype), _bn(shape[1], training)
    got = _run(_fused, x, bn, act)
    # reference: fp32 math on the same (bf16-rounded) input, then compared at the storage precision
    want = _run(_reference, x.detach().float().contiguous(memory_format=torch.channels_last), bn,
                act, got[1].float())
    rel = 1e-5 if dtype == torch.float32 else 2.0**-7
    assert got[0].dtype == dtype and got[0].is_contiguous(memory_format=torch.channels_last)
    for g, w in zip(got[:1] + got[2:], want[:1] + want[2:], strict=True):
        _close(g, w, rel if g.dtype == dtype else 1e-4)
    if training:  # no window covers the last odd row / column: zero gradient there
        if shape[2] % 2:
            assert torch.equal(got[2][:, :, -1], torch.zeros_like(got[2][:, :, -1]))
        if shape[3] % 2:
            assert torch.equal(got[2][..., -1], torch.zeros_like(got[2][..., -1]))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pool_bn_act_bit_exact_against_the_unfused_path(shape, dtype, old_loops):
    x, bn = _input(shape, dtype, ties=True), _bn(shape[1], True)
    got = _run(_fused, x, bn, "gelu")
    with old_loops:
        want = _run(_unfused, x, bn, "gelu", got[1])
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)


@pytest.mark.parametrize("shape", [(3, 13, 5, 7), (2, 70, 3, 3), (5, 24, 15, 15)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("act", ["gelu", "relu", "silu", "identity"])
def test_nhwc_bn_act_loops_bit_exact_against_the_old_loops(shape, dtype, act, old_loops):
    x, bn = _input(shape, dtype), _bn(shape[1], True)
    with _Loops(True):
        got = _run(csrc_bn_act.bn_act, x, bn, act)
    with old_loops:
        want = _run(csrc_bn_act.bn_act, x, bn, act, got[1])
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    ref = _run(reference_bn_act, x.detach().float().contiguous(memory_format=torch.channels_last),
               bn, act, got[1].float())
    _close(got[0], ref[0], 1e-5 if dtype == torch.float32 else 2.0**-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bit_identical_on_repeat_and_thread_count(dtype):
    x, bn = _input((4, 70, 31, 31), dtype), _bn(70, True)
    first = _run(_fused, x, bn, "gelu")
    again = _run(_fused, x, bn, "gelu", first[1])
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if threads > 1 else 2)
    try:
        other = _run(_fused, x, bn, "gelu", first[1])
    finally:
        torch.set_num_threads(threads)
    for a, b, c in zip(first, again, other, strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_cpu_conv_group_uses_the_fused_op_and_matches_the_unfused_group(monkeypatch):
    grp = ConvGroup(5, 13)
    grp.bn_act = csrc_bn_act.bn_act  # the cpu backend's, with which the group fuses the pool
    assert dispatch.get_op("bn_act", "cpu") is csrc_bn_act.bn_act
    x = torch.randn(3, 5, 11, 9).bfloat16().contiguous(memory_format=torch.channels_last)
    results = []
    for fused in (True, False):
        monkeypatch.setattr(conv_group, "FUSED_POOL", fused)
        g = copy.deepcopy(grp)
        g.bn_act = csrc_bn_act.bn_act
        xx = x.clone().requires_grad_(True)
        with torch.profiler.profile() as prof:
            y = conv_group.conv_group_cpu(g, xx)
            y.float().square().sum().backward()
        names = {e.name for e in prof.events()}
        assert ("dawnbench::csrc_pool_bn_act_fwd" in names) == fused
        assert ("dawnbench::csrc_pool_bn_act_bwd" in names) == fused
        results.append((y, xx.grad, g.conv1.weight.grad, g.norm1.bias.grad, g.norm1.running_var))
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


def test_pool_bn_act_rejects_bad_inputs():
    bn = _bn(4, True)
    with pytest.raises(TypeError, match="fp32/bf16"):
        csrc_bn_act.pool_bn_act_fwd(torch.randn(2, 4, 4, 4).half(), bn.weight, bn.bias, None, None, True,
                            1e-5, 0.1, "gelu")
    with pytest.raises(ValueError, match="channels"):
        csrc_bn_act.pool_bn_act_fwd(torch.randn(2, 5, 4, 4), bn.weight, bn.bias, None, None, True, 1e-5,
                            0.1, "gelu")
    # fp16 takes the unfused path instead of failing
    y = csrc_bn_act.pool_bn_act(torch.randn(2, 4, 4, 4).half(), bn, "gelu")
    assert y.dtype == torch.float16 and y.shape == (2, 4, 2, 2)


@pytest.mark.build
def test_fused_source_compiles_without_avx512():
    """The one-lane fallback (the baseline copy; DAWNBENCH_MARCH for an older CPU)."""
    args = [*build.cpu_compile_args(), "-DDBF_CPU_ISA=v3"]
    r = subprocess.run(["g++", "-fsyntax-only", *args, "-march=x86-64-v3", "-Werror",
                        "-I", str(build.HERE), str(build.HERE / "bn_act_pool_cpu.cpp")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


def _other_cpu_path():
    """The baseline copy, where this build and CPU also run the AVX-512 one."""
    runs = dict(native.load().cpu_paths())
    if not (runs.get("avx512") and runs.get("baseline")):
        pytest.skip(f"needs the portable build's two CPU paths on an AVX-512 CPU (have {runs})")
    return "baseline"


class _Path:
    """Run a block with the C++ CPU kernels' copy ``name`` (restored after)."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.mod = native.load()
        self.was = self.mod.cpu_path()
        self.mod.set_cpu_path(self.name)

    def __exit__(self, *exc):
        self.mod.set_cpu_path(self.was)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("act", ["gelu", "silu"])
def test_baseline_and_avx512_paths_bit_identical(dtype, act):
    """bn_act_vec.h's AVX-512 forms give the scalar code's bits, so the two copies
    of the portable build agree exactly: fused pool, NHWC loops, old loops."""
    baseline = _other_cpu_path()
    x, bn = _input((4, 37, 13, 11), dtype, ties=True), _bn(37, True)
    x_nhwc = _input((3, 37, 9, 7), dtype)
    results = {}
    for path in ("avx512", baseline):
        with _Path(path):
            assert native.load().nhwc_kernels_vectorised() == (path == "avx512")
            fused = _run(_fused, x, bn, act, results["avx512"][0][1] if results else None)
            with _Loops(True):
                nhwc = _run(csrc_bn_act.bn_act, x_nhwc, bn, act, results["avx512"][1][1] if results else None)
            with _Loops(False):
                old = _run(csrc_bn_act.bn_act, x_nhwc, bn, act, nhwc[1])
            results[path] = (fused, nhwc, old)
    for got, want in zip(results[baseline], results["avx512"], strict=True):
        for g, w in zip(got, want, strict=True):
            assert torch.equal(g, w)
