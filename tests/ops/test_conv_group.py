"""conv_group: every backend's conv group (forward and backward) against the
reference (dawnbench_fast.layer_ops.conv_group); then the Triton pieces, the
fused conv3x3 (prologue BN+act, epilogue max-pool + BN statistics) and its
weight gradient, in the interpreter on CPU tensors, and the cpu backend's
shape-tuned 3x3 conv (csrc/conv_group.py: every weight-gradient method and
its autograd Function against torch's conv2d autograd, fp32 and bf16). Odd
spatial sizes exercise the floor-mode pool; channel counts are not multiples
of the tile sizes.

fp32 uses IEEE dot products here (the interpreter; on a GPU fp32 follows
torch.backends.cudnn.allow_tf32). fp16 runs the fp16 dot with fp32
accumulation; bf16 is storage + conversion only (no bf16 arithmetic in the
interpreter), with tolerances to match.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
import torch.nn.functional as F

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import conv_group as cpu_group
from dawnbench_fast.kernels import conv_group as tk
from dawnbench_fast.kernels import launch_counts, launches
from dawnbench_fast.kernels.launches import poisoned_outputs
from dawnbench_fast.models.layers import ConvGroup

conv_group_ref = dispatch.reference("conv_group")
conv3x3_reference, conv3x3_wgrad_reference = tk.conv3x3_reference, tk.conv3x3_wgrad_reference
pytestmark = pytest.mark.usefixtures("seed_from_test_id")


@pytest.fixture(autouse=True)
def _small_tiles(monkeypatch):
    """Tiles of 32 conv rows (8 pooling windows): several tiles per test, and
    masked partial tiles at the end."""
    monkeypatch.setattr(tk, "INTERPRETER_CONV_BLOCK_M", 32)
    monkeypatch.setattr(launches, "INTERPRETER_ROWS", 16)


TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2)}


def assert_close_scaled(got, want, rel, name=""):
    """|got - want| <= rel * max|want| everywhere: gradients through a batch
    norm with eps 1e-12 can be huge on near-constant channels, so an
    element-wise relative check would judge rounding noise."""
    err = (got.float() - want.float()).abs().max().item()
    ref = want.float().abs().max().item()
    assert err <= rel * ref + 1e-6, f"{name}: max error {err:.3g} vs max |ref| {ref:.3g}"


def _run_conv(x_nchw, w, scale, shift, act, pool, deterministic, dtype):
    xh = x_nchw.permute(0, 2, 3, 1).contiguous().to(dtype)
    e = torch.empty(0)
    sc, sh = (scale, shift) if scale is not None else (e, e)
    fn = tk.conv3x3_pool_fwd if pool else tk.conv3x3_fwd
    with poisoned_outputs():
        return fn(xh, tk.wmat(w, dtype), sc, sh, act, True, deterministic)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("pool", [False, True])
@pytest.mark.parametrize("prologue", [False, True])
def test_triton_conv3x3_forward(dtype, pool, prologue):
    # pooled: 9 windows an image against 8 a tile, so tiles start mid-row and
    # mid-image (the kernel addresses each tile from its first input pixel)
    n, cin, cout, h, w = (2, 5, 20, 7, 7) if pool else (2, 17, 12, 5, 6)
    x = torch.randn(n, cin, h, w)
    weight = torch.randn(cout, cin, 3, 3) / 4
    scale, shift = (torch.rand(cin) + 0.5, torch.randn(cin)) if prologue else (None, None)
    y, idx, ps, pq = _run_conv(x, weight, scale, shift, "gelu", pool, False, dtype)
    # reference on the same rounded operands, fp32 math
    xr, wr = x.to(dtype).float(), weight.to(dtype).float()
    if prologue:  # the kernel rounds the activated input to the compute dtype
        xr = torch.nn.functional.gelu(xr * scale[:, None, None] + shift[:, None, None])
        xr = xr.to(dtype).float()
        want = conv3x3_reference(xr, wr, pool=pool)
    else:
        want = conv3x3_reference(xr, wr, pool=pool)
    want = want.permute(0, 2, 3, 1)
    rtol, atol = TOL[dtype]
    assert y.dtype == dtype and y.shape == want.shape
    torch.testing.assert_close(y.float(), want, rtol=rtol, atol=atol)
    # statistics are of the stored output, fp32
    yf = y.float().reshape(-1, cout)
    torch.testing.assert_close(ps.sum(0), yf.sum(0), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(pq.sum(0), (yf * yf).sum(0), rtol=1e-4, atol=1e-3)
    if pool:  # argmax code points at the max of each 2x2 window
        full = conv3x3_reference(xr, wr).permute(0, 2, 3, 1)[:, : 2 * y.shape[1], : 2 * y.shape[2]]
        win = full.reshape(n, y.shape[1], 2, y.shape[2], 2, cout).permute(0, 1, 3, 5, 2, 4)
        picked = win.reshape(*win.shape[:4], 4).gather(-1, idx.long()[..., None])[..., 0]
        torch.testing.assert_close(picked, want, rtol=rtol, atol=atol)
        assert int(idx.min()) >= 0 and int(idx.max()) <= 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("prologue", [False, True])
@pytest.mark.parametrize("splits", [1, 3])
def test_triton_conv3x3_weight_gradient(dtype, prologue, splits, monkeypatch):
    monkeypatch.setattr(tk, "INTERPRETER_WGRAD_BLOCK_K", 16)  # several K steps, masked tail
    monkeypatch.setattr(tk, "INTERPRETER_WGRAD_SPLITS", splits)  # >1: atomic split-K
    n, cin, cout, h, w = 2, 19, 13, 5, 7
    x = torch.randn(n, h, w, cin).to(dtype)
    dy = torch.randn(n, h, w, cout).to(dtype)
    e = torch.empty(0)
    scale, shift = (torch.rand(cin) + 0.5, torch.randn(cin)) if prologue else (e, e)
    with poisoned_outputs():
        got = tk.conv3x3_wgrad(x, dy, scale, shift, "gelu", splits == 1)
    xin = x.float()
    if prologue:  # the kernel rounds the recomputed activation to the storage dtype
        xin = torch.nn.functional.gelu(xin * scale + shift).to(dtype).float()
    want = conv3x3_wgrad_reference(xin.permute(0, 3, 1, 2), dy.float().permute(0, 3, 1, 2),
                                   (cout, cin))
    got = got.view(3, 3, cin, cout).permute(3, 2, 0, 1)
    assert_close_scaled(got, want, {torch.float32: 1e-5, torch.float16: 2e-3,
                                    torch.bfloat16: 1e-2}[dtype], "dW")


def test_triton_conv3x3_deterministic_partials_match_atomics():
    x = torch.randn(3, 6, 9, 8)  # 192 conv rows: several M tiles
    w = torch.randn(13, 6, 3, 3)
    _, _, ps_a, pq_a = _run_conv(x, w, None, None, "gelu", True, False, torch.float32)
    y, _, ps_d, pq_d = _run_conv(x, w, None, None, "gelu", True, True, torch.float32)
    assert ps_d.shape[0] > 1 and ps_a.shape[0] == 1
    torch.testing.assert_close(ps_a[0], ps_d.sum(0), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(pq_a[0], pq_d.sum(0), rtol=1e-5, atol=1e-4)


def _groups(cin, cout, act):
    g = ConvGroup(cin, cout, act=act)
    with torch.no_grad():
        for bn in (g.norm1, g.norm2):
            bn.bias.normal_()
            bn.running_mean.normal_()
            bn.running_var.uniform_(0.5, 2)
        g.conv1.weight.add_(torch.randn_like(g.conv1.weight) * 0.1)
    return g, copy.deepcopy(g)


@pytest.mark.parametrize("shape,cout", [((1, 5, 7, 9), 12), ((2, 24, 6, 6), 20)])
@pytest.mark.parametrize("act", ["gelu", "relu"])
def test_conv_group_training_forward_backward(implementation, backend, device, shape, cout, act):
    op = implementation("conv_group")
    g, g_ref = (m.to(device) for m in _groups(shape[1], cout, act))
    x = torch.randn(shape, device=device).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    before = dict(launch_counts)
    with poisoned_outputs():
        y = op(g, x)
        dy = torch.randn(y.shape, device=device)
        (y * dy).sum().backward()
    y_ref = conv_group_ref(g_ref, x_ref)
    (y_ref * dy).sum().backward()
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-4)
    assert_close_scaled(x.grad, x_ref.grad, 1e-4, "x")
    for (name, p), p_ref in zip(g.named_parameters(), g_ref.parameters(), strict=True):
        assert (p.grad is None) == (p_ref.grad is None), name
        if p.grad is not None:
            assert_close_scaled(p.grad, p_ref.grad, 1e-4, name)
    for bn, bn_ref in ((g.norm1, g_ref.norm1), (g.norm2, g_ref.norm2)):
        torch.testing.assert_close(bn.running_mean, bn_ref.running_mean, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(bn.running_var, bn_ref.running_var, rtol=1e-5, atol=1e-5)
    if backend != "triton":
        return
    for k in ("conv3x3_pool_fwd", "bn_finalize", "bn_act_bwd_apply"):
        assert launch_counts[k] > before.get(k, 0), k
    # conv2 forward + both data gradients run on the implicit-GEMM kernel,
    # both weight gradients on the wgrad kernel
    assert launch_counts["conv3x3_fwd"] == before.get("conv3x3_fwd", 0) + 3
    assert launch_counts["conv3x3_wgrad"] == before.get("conv3x3_wgrad", 0) + 2


def test_triton_conv_group_backward_with_aten_data_gradient(monkeypatch):
    """The fallback (aten/cuDNN data and weight gradients) gives the same
    gradients."""
    monkeypatch.setattr(tk, "TRITON_DGRAD", False)
    monkeypatch.setattr(tk, "TRITON_WGRAD", False)
    g, g_ref = _groups(7, 18, "gelu")
    x = torch.randn(2, 7, 6, 5).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    dy = torch.randn(2, 18, 3, 2)
    (tk.conv_group(g, x) * dy).sum().backward()
    (conv_group_ref(g_ref, x_ref) * dy).sum().backward()
    assert_close_scaled(x.grad, x_ref.grad, 1e-4, "x")
    assert_close_scaled(g.conv2.weight.grad, g_ref.conv2.weight.grad, 1e-4, "conv2")


@pytest.mark.parametrize("fused", [False, True])
def test_triton_conv_group_second_conv_input_stored_or_recomputed(fused, monkeypatch):
    """FUSED_PROLOGUE: the second conv's input act(bn(y1)) recomputed by the
    conv and its weight gradient (True), or made once by affine_act and kept
    for the backward (False, the default); both give the reference's
    gradients, and only the stored one launches affine_act for it."""
    monkeypatch.setattr(tk, "FUSED_PROLOGUE", fused)
    g, g_ref = _groups(7, 18, "gelu")
    x = torch.randn(2, 7, 9, 5).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    dy = torch.randn(2, 18, 4, 2)
    before = launch_counts.get("affine_act", 0)
    with poisoned_outputs():
        (tk.conv_group(g, x) * dy).sum().backward()
    assert launch_counts["affine_act"] - before == (1 if fused else 2)  # + the output's BN+act
    (conv_group_ref(g_ref, x_ref) * dy).sum().backward()
    assert_close_scaled(x.grad, x_ref.grad, 1e-4, "x")
    for name in ("conv1", "conv2"):
        got, want = getattr(g, name).weight.grad, getattr(g_ref, name).weight.grad
        assert_close_scaled(got, want, 1e-4, name)


def test_triton_conv_group_eval_and_fp16():
    g, g_ref = _groups(5, 12, "gelu")
    g.eval()
    g_ref.eval()
    x = torch.randn(2, 5, 8, 7)
    with torch.no_grad(), poisoned_outputs():
        y = tk.conv_group(g, x)
        y16 = tk.conv_group(g, x.half())
    y_ref = conv_group_ref(g_ref, x)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-4)
    assert y16.dtype == torch.float16
    torch.testing.assert_close(y16.float(), y_ref, rtol=3e-2, atol=3e-2)


def test_triton_conv_group_bf16_training_storage():
    """bf16 activations end to end (fp32 math in the interpreter)."""
    g, g_ref = _groups(6, 16, "gelu")
    x = torch.randn(2, 6, 6, 6)
    with poisoned_outputs():
        y = tk.conv_group(g, x.bfloat16())
    y_ref = conv_group_ref(g_ref, x.bfloat16().float())
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), y_ref, rtol=6e-2, atol=6e-2)


def test_triton_conv_group_deterministic_mode(monkeypatch):
    """Per-tile partial statistics and single-split weight gradients (no
    atomics) give the reference's results, bitwise repeatably."""
    monkeypatch.setattr(launches, "DETERMINISTIC_STATS", True)
    g, g_ref = _groups(9, 20, "gelu")
    x = torch.randn(2, 9, 8, 6)
    dy = torch.randn(2, 20, 4, 3)
    grads = []
    for _ in range(2):
        gg = copy.deepcopy(g)
        xx = x.clone().requires_grad_(True)
        (tk.conv_group(gg, xx) * dy).sum().backward()
        grads.append((xx.grad, gg.conv1.weight.grad, gg.conv2.weight.grad, gg.norm1.running_var))
    x_ref = x.clone().requires_grad_(True)
    (conv_group_ref(g_ref, x_ref) * dy).sum().backward()
    for a, b in zip(grads[0], grads[1], strict=True):
        assert torch.equal(a, b)
    assert_close_scaled(grads[0][0], x_ref.grad, 1e-4, "x")
    assert_close_scaled(grads[0][1], g_ref.conv1.weight.grad, 1e-4, "conv1")
    assert_close_scaled(grads[0][2], g_ref.conv2.weight.grad, 1e-4, "conv2")
    torch.testing.assert_close(grads[0][3], g_ref.norm1.running_var, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- cpu backend (oneDNN + tuned wgrad)
CPU_TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}
CPU_SHAPES = [(1, 3, 5, 7), (3, 24, 17, 13), (5, 13, 9, 31)]  # (N, Cin, HW, Cout): odd on purpose
# torch's methods; our dpbf16 kernel has its own tests (test_conv_group_wgrad.py)
TORCH_WGRAD = [m for m in cpu_group.WGRAD_METHODS if m not in cpu_group.BACKEND_METHODS]


def cpu_inputs(n, cin, hw, cout, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, cin, hw, hw + 2, generator=gen).to(dtype).to(memory_format=torch.channels_last)
    w = (torch.randn(cout, cin, 3, 3, generator=gen) / (3 * cin**0.5)).to(dtype)
    g = torch.randn(n, cout, hw, hw + 2, generator=gen).to(dtype)
    return x, w, g


def cpu_scaled_close(got, want, tol):
    """Compare relative to the tensor's scale (bf16 sums of many terms)."""
    scale = want.float().abs().max().clamp_min(1e-6)
    torch.testing.assert_close(got.float() / scale, want.float() / scale, **tol)


@pytest.mark.parametrize("method", TORCH_WGRAD)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", CPU_SHAPES)
def test_cpu_weight_gradient_methods(method, dtype, shape):
    x, w, g = cpu_inputs(*shape, dtype, seed=sum(shape))
    want = torch.ops.aten.convolution_backward(
        g.double(), x.double(), w.double(), None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
        [False, True, False])[1]
    got = cpu_group._METHODS[method](x, g.contiguous(memory_format=torch.channels_last), w)
    assert got.shape == w.shape and got.dtype == dtype and torch.isfinite(got).all()
    cpu_scaled_close(got, want, CPU_TOL[dtype])


@pytest.mark.parametrize("method", [None, *TORCH_WGRAD])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_conv3x3_function_matches_conv2d_autograd(method, dtype, monkeypatch):
    monkeypatch.setattr(cpu_group, "FORCE", method)
    x, w, g = cpu_inputs(3, 13, 9, 20, dtype, seed=5)
    x1, w1 = x.clone().requires_grad_(), w.clone().requires_grad_()
    x2, w2 = x.double().requires_grad_(), w.double().requires_grad_()
    y1 = cpu_group.Conv3x3.apply(x1, w1)
    y2 = F.conv2d(x2, w2, padding=1)
    cpu_scaled_close(y1, y2, CPU_TOL[dtype])
    y1.backward(g)
    y2.backward(g.double())
    cpu_scaled_close(x1.grad, x2.grad, CPU_TOL[dtype])
    cpu_scaled_close(w1.grad, w2.grad, CPU_TOL[dtype])


def test_cpu_autotune_records_one_choice_per_shape(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cpu_group, "_CHOICE", {})
    monkeypatch.setattr(cpu_group, "_BEFORE_POOL_RAN", set())  # what other tests' groups ran
    monkeypatch.setattr(cpu_group.dgrad, "RAN", {})
    monkeypatch.setenv("DAWNBENCH_CACHE", str(tmp_path))
    monkeypatch.setenv("DAWNBENCH_WGRAD", "auto")  # opt-in: the default is aten, never timed
    monkeypatch.setattr(cpu_group, "REPS", 2)
    x, w, g = cpu_inputs(2, 8, 7, 12, torch.bfloat16, seed=1)
    w = w.requires_grad_()
    cpu_group.Conv3x3.apply(x, w).backward(g)
    assert list(cpu_group._CHOICE.values())[0]["method"] in cpu_group.WGRAD_METHODS
    assert len(cpu_group.chosen_methods()) == 1
    assert "timing the weight-gradient methods" in capsys.readouterr().err  # the one-line note
    saved = json.loads(cpu_group.cache_path().read_text())
    chosen = list(cpu_group.chosen_methods().values())[0]
    assert len(saved) == 1 and list(saved.values())[0]["method"] == chosen


def test_cpu_wgrad_choice_is_read_back_from_the_cache(monkeypatch, tmp_path, capsys):
    """A second process (simulated: this process's choices cleared) takes the
    saved choice without timing anything; frozen never measures; a forced
    policy wins; an unknown policy is a one-line error."""
    monkeypatch.setenv("DAWNBENCH_CACHE", str(tmp_path))
    monkeypatch.setenv("DAWNBENCH_WGRAD", "auto")
    x, w, g = cpu_inputs(2, 8, 7, 12, torch.bfloat16, seed=1)
    key = cpu_group._cache_key(x, w)
    cpu_group._write_cache(key, {"method": "im2col"})
    monkeypatch.setattr(cpu_group, "_CHOICE", {})
    monkeypatch.setattr(cpu_group, "measure_wgrad", lambda *a: pytest.fail("measured again"))
    assert cpu_group.choose_wgrad(x, g, w) == "im2col"
    assert cpu_group.wgrad_decisions()[next(iter(cpu_group.chosen_methods()))]["source"] == "cache"
    monkeypatch.setattr(cpu_group, "_CHOICE", {})
    x2, w2, g2 = cpu_inputs(3, 8, 7, 12, torch.bfloat16, seed=2)  # not in the cache
    monkeypatch.setenv("DAWNBENCH_WGRAD", "frozen")
    assert cpu_group.choose_wgrad(x2, g2, w2) == cpu_group.default_method(x2, w2)
    monkeypatch.setattr(cpu_group, "_CHOICE", {})
    cpu_group.set_wgrad_policy("fp32")
    try:
        assert cpu_group.choose_wgrad(x, g, w) == "fp32"
    finally:
        cpu_group.set_wgrad_policy(None)
    with pytest.raises(ValueError, match="wgrad policy"):
        cpu_group.set_wgrad_policy("fastest")
    assert "timing" not in capsys.readouterr().err


def test_cpu_wgrad_default_is_fixed_and_never_timed(monkeypatch, tmp_path, capsys):
    """Where no backend kernel applies (12 output channels: not a multiple of
    16) the default runs aten, ignoring a cached choice (a stale cache once
    made a shape 2x slower) and timing nothing."""
    monkeypatch.setenv("DAWNBENCH_CACHE", str(tmp_path))
    monkeypatch.delenv("DAWNBENCH_WGRAD", raising=False)
    monkeypatch.setattr(cpu_group, "_CHOICE", {})
    x, w, g = cpu_inputs(2, 8, 7, 12, torch.bfloat16, seed=3)
    cpu_group._write_cache(cpu_group._cache_key(x, w), {"method": "fp32"})
    monkeypatch.setattr(cpu_group, "measure_wgrad", lambda *a: pytest.fail("measured"))
    assert cpu_group.choose_wgrad(x, g, w) == "aten"
    assert list(cpu_group.wgrad_decisions().values())[0]["source"] == "default"
    assert "timing" not in capsys.readouterr().err


@pytest.mark.parametrize("amx", [False, True])
def test_cpu_wgrad_default_takes_one_gemm_on_small_maps_where_onednn_has_amx(amx, monkeypatch):
    """oneDNN's AMX weight gradient on 3x3 maps took 4-8x its forward's time;
    the default runs im2col's single GEMM there (maps of at most
    AMX_IM2COL_MAX_PIXELS), and leaves larger maps and other CPUs as they were."""
    monkeypatch.setattr(cpu_group.wgrad, "onednn_has_amx", lambda: amx)
    monkeypatch.setattr(cpu_group, "_KERNELS", {})  # ours aside: the rule under test only
    small, _, _ = cpu_inputs(2, 8, 3, 16, torch.bfloat16, seed=4)  # 3 x 5 = 15 pixels
    large, w, _ = cpu_inputs(2, 8, 7, 16, torch.bfloat16, seed=4)
    pixels = [t.shape[2] * t.shape[3] for t in (small, large)]
    assert pixels[0] <= cpu_group.AMX_IM2COL_MAX_PIXELS < pixels[1]
    assert cpu_group.default_method(small, w) == ("im2col" if amx else "aten")
    assert cpu_group.default_method(large, w) == "aten"
    assert cpu_group.default_method(small.float(), w.float()) == "aten"  # bf16 only


def test_cpu_wgrad_measurement_keeps_aten_within_the_margin(monkeypatch):
    cost = {"aten": 1.0, "fp32": 0.95, "im2col": 3.0}  # fp32 only 5% faster: below MARGIN
    now = [0.0]

    def fake_clock():
        return now[0]

    calls = []

    def timed(name):
        def fn(*a):
            calls.append(name)
            now[0] += cost[name]
        return fn

    monkeypatch.setattr(cpu_group, "_METHODS", {k: timed(k) for k in cost})
    monkeypatch.setattr(cpu_group, "_KERNELS", {})  # none of our kernels: aten is the incumbent
    monkeypatch.setattr(cpu_group.time, "perf_counter", fake_clock)
    x, w, g = cpu_inputs(2, 8, 7, 16, torch.bfloat16, seed=5)  # a 7 x 9 map: aten is the incumbent
    got = cpu_group.measure_wgrad(x, g, w)
    assert got["method"] == "aten"
    assert calls.count("im2col") == 2  # warm-up + the first round only: 3x slower, dropped
    cost["fp32"] = 0.5
    assert cpu_group.measure_wgrad(x, g, w)["method"] == "fp32"


def test_cpu_conv_group_matches_reference_group():
    torch.manual_seed(3)
    grp = ConvGroup(5, 12)
    x = torch.randn(4, 5, 11, 11)
    ref_out = conv_group_ref(grp, x)
    ref_out.sum().backward()
    ref_grads = [p.grad.clone() for p in grp.parameters() if p.requires_grad]
    grp.zero_grad()
    out = cpu_group.conv_group_cpu(grp, x)
    out.sum().backward()
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
    for a, b in zip([p.grad for p in grp.parameters() if p.requires_grad], ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
