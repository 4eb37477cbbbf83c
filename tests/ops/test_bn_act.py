"""bn_act: batch norm + activation, every backend against the reference
(dawnbench_fast.layer_ops.bn_act), then each backend's own pieces: the Triton
kernels (statistics, finalize, affine+act, backward) in the interpreter, and
the CPU (OpenMP) build of csrc's shared math through its raw entry points.
Outputs are poisoned with NaN before each call; sizes are odd.

bf16 under Triton is tested for storage and conversion only: the interpreter
has no bf16 arithmetic, so bf16 tensors are widened to fp32 inside the kernels.
"""

from __future__ import annotations

import copy
import dataclasses
import zlib

import numpy as np
import pytest
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import bn_act as csrc_bn_act
from dawnbench_fast.csrc import native
from dawnbench_fast.kernels import launch_counts, launches
from dawnbench_fast.kernels.launches import poisoned_outputs
from dawnbench_fast.models.layers import BatchNorm
from dawnbench_fast.vocabulary import activation

reference = dispatch.reference("bn_act")


pytestmark = pytest.mark.usefixtures("seed_from_test_id", "small_interpreter_tiles")


@pytest.fixture
def tk():
    """The Triton op module (skips where Triton is not installed)."""
    return pytest.importorskip("dawnbench_fast.kernels.bn_act")


def _bn_pair(chans, training, device="cpu"):
    bn = BatchNorm(chans)
    bn.bias.data.normal_()
    bn.weight.data.uniform_(0.5, 1.5)  # frozen in the net, but exercise it
    bn.running_mean.normal_()
    bn.running_var.uniform_(0.5, 2)
    bn.train(training)
    bn = bn.to(device)
    return bn, copy.deepcopy(bn)


# ---------------------------------------------------------------- every backend
@pytest.mark.parametrize("shape", [(1, 20, 3, 5), (3, 12, 5, 5), (2, 70, 3, 3)])
@pytest.mark.parametrize("act", ["gelu", "relu"])
@pytest.mark.parametrize("training", [True, False])
def test_bn_act_forward_backward(implementation, backend, device, shape, act, training):
    op = implementation("bn_act")
    bn, bn_ref = _bn_pair(shape[1], training, device)
    bn.weight.requires_grad_(True)
    bn_ref.weight.requires_grad_(True)
    x = (torch.randn(shape, device=device) * 2 + 0.3).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    before = launch_counts["bn_act_bwd_apply"]
    with poisoned_outputs():
        y = op(x, bn, act)
        dy = torch.randn(shape, device=device)
        (y * dy).sum().backward()
    y_ref = reference(x_ref, bn_ref, act)
    (y_ref * dy).sum().backward()
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(bn.bias.grad, bn_ref.bias.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(bn.weight.grad, bn_ref.weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(bn.running_mean, bn_ref.running_mean)
    torch.testing.assert_close(bn.running_var, bn_ref.running_var)
    assert int(bn.num_batches_tracked) == int(bn_ref.num_batches_tracked)
    if backend == "triton":
        assert y.is_contiguous(memory_format=torch.channels_last)
        assert launch_counts["bn_act_bwd_apply"] == before + 1


# ---------------------------------------------------------------- Triton pieces
TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


# The kernels' references: the statistics and finalize steps in torch.
def channel_stats_reference(x2d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: fp32 column sums and sums of squares of an R x C matrix."""
    x = x2d.float()
    return x.sum(0), (x * x).sum(0)


def bn_finalize_reference(
    s: torch.Tensor, q: torch.Tensor, count: int, weight: torch.Tensor, bias: torch.Tensor,
    running_mean: torch.Tensor, running_var: torch.Tensor, momentum: float, eps: float,
    training: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference of bn_finalize_kernel on summed statistics; updates running stats in place."""
    if training:
        mean = s / count
        var = (q / count - mean * mean).clamp_min(0)
        running_mean.mul_(1 - momentum).add_(momentum * mean)
        running_var.mul_(1 - momentum).add_(momentum * var * count / max(count - 1, 1))
    else:
        mean, var = running_mean.clone(), running_var.clone()
    invstd = torch.rsqrt(var + eps)
    scale = weight * invstd
    return mean, invstd, scale, bias - mean * scale


def bn_bwd_coef_reference(
    g_sum: torch.Tensor, gx_sum: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor,
    scale: torch.Tensor, count: float, training: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference of bn_bwd_coef_kernel on summed partials: (d weight, d bias,
    A, B) with dx = g*scale + A + B*x. In training the batch mean and variance
    depend on x, which A and B carry."""
    g_xhat = invstd * (gx_sum - mean * g_sum)
    if not training:
        z = torch.zeros_like(g_sum)
        return g_xhat, g_sum, z, z
    b = -scale * invstd * g_xhat / count
    a = -scale * g_sum / count - b * mean
    return g_xhat, g_sum, a, b


@pytest.mark.parametrize("rows,chans", [(1, 3), (37, 20), (130, 70)])
@pytest.mark.parametrize("deterministic", [False, True])
def test_triton_channel_stats(tk, rows, chans, deterministic):
    x = torch.randn(rows, chans) * 3 + 1
    with poisoned_outputs():
        s, q = tk.channel_stats(x, deterministic)
    if not deterministic:
        assert s.shape[0] == 1  # atomics: one row
    want_s, want_q = channel_stats_reference(x)
    torch.testing.assert_close(s.sum(0), want_s, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(q.sum(0), want_q, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("training", [True, False])
def test_triton_bn_finalize_matches_reference(tk, training):
    C, n = 19, 50
    x = torch.randn(n, C) * 2 + 0.5
    s, q = x.sum(0, keepdim=True), (x * x).sum(0, keepdim=True)
    w, b = torch.rand(C) + 0.5, torch.randn(C)
    rm, rv = torch.randn(C), torch.rand(C) + 0.1
    rm2, rv2 = rm.clone(), rv.clone()
    with poisoned_outputs():
        got = tk.bn_finalize(s, q, float(n), w, b, rm, rv, 0.4, 1e-5, training, True)
    want = bn_finalize_reference(s[0], q[0], n, w, b, rm2, rv2, 0.4, 1e-5, training)
    for g, r in zip(got, want, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rm, rm2)
    torch.testing.assert_close(rv, rv2)


# 1100 rows: three steps of the 512-row tile; 70 channels: blocks of 16 (and 64 for few rows)
@pytest.mark.parametrize("parts,chans", [(1, 5), (130, 70), (1100, 70)])
def test_triton_bn_finalize_sums_many_partial_rows(tk, parts, chans):
    s, q = torch.randn(parts, chans), torch.rand(parts, chans) * 4 + 40
    w, b = torch.rand(chans) + 0.5, torch.randn(chans)
    rm, rv = torch.randn(chans), torch.rand(chans) + 0.1
    rm2, rv2 = rm.clone(), rv.clone()
    n = 40 * parts
    with poisoned_outputs():
        got = tk.bn_finalize(s, q, float(n), w, b, rm, rv, 0.1, 1e-5, True, True)
    want = bn_finalize_reference(s.double().sum(0).float(), q.double().sum(0).float(), n, w, b,
                                    rm2, rv2, 0.1, 1e-5, True)
    for g, r in zip(got, want, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close((rm, rv), (rm2, rv2), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("parts,chans", [(3, 5), (130, 70), (1100, 70)])
def test_triton_bn_bwd_coefficients_match_reference(tk, training, parts, chans):
    pg, pgx = torch.randn(parts, chans), torch.randn(parts, chans) * 3
    mean, invstd, scale = torch.randn(chans), torch.rand(chans) + 0.2, torch.randn(chans)
    with poisoned_outputs():
        got = tk.bn_bwd_coefficients(pg, pgx, mean, invstd, scale, 777.0, training)
    want = bn_bwd_coef_reference(pg.double().sum(0), pgx.double().sum(0), mean.double(),
                                    invstd.double(), scale.double(), 777.0, training)
    tol = 2e-5 * max(1.0, (parts / 130) ** 0.5)  # fp32 sums: rounding grows with the rows summed
    for g, r in zip(got, want, strict=True):
        torch.testing.assert_close(g, r.float(), rtol=tol, atol=tol)
    twice = tk.bn_bwd_coefficients(pg, pgx, mean, invstd, scale, 777.0, training)
    assert all(torch.equal(a, b) for a, b in zip(got, twice, strict=True))  # fixed order


@pytest.mark.parametrize("act", ["gelu", "relu", "silu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_triton_affine_act(tk, act, dtype):
    x = torch.randn(45, 21).to(dtype)
    scale, shift = torch.rand(21) + 0.5, torch.randn(21)
    with poisoned_outputs():
        y = tk.affine_act(x, scale, shift, act)
    want = activation(act).fn(x.float() * scale + shift)
    assert y.dtype == dtype
    torch.testing.assert_close(y.float(), want, rtol=TOL[dtype], atol=TOL[dtype])


def test_triton_bn_act_bf16_storage(tk):
    """bf16 activations: stored bf16, statistics and math in fp32."""
    bn, bn_ref = _bn_pair(24, True)
    x = torch.randn(2, 24, 4, 3).bfloat16()
    with poisoned_outputs():
        y = tk.bn_act(x, bn, "gelu")
    y_ref = reference(x.float(), bn_ref, "gelu")
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), y_ref, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(bn.running_mean, bn_ref.running_mean, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", [True, None])  # --deterministic, and the default: the same order
def test_triton_bn_act_is_bitwise_repeatable_forward_and_backward(tk, monkeypatch, mode):
    monkeypatch.setattr(launches, "DETERMINISTIC_STATS", mode)
    x0 = torch.randn(4, 33, 5, 5) * 2 + 0.5
    bn, _ = _bn_pair(33, True)
    g = torch.randn_like(x0)
    runs = []
    for _ in range(2):
        x, b = x0.clone().requires_grad_(True), copy.deepcopy(bn)
        y = tk.bn_act(x, b, "gelu")
        y.backward(g)
        runs.append((y, x.grad, b.bias.grad, b.running_mean, b.running_var))  # weight: frozen
    assert all(torch.equal(p, q) for p, q in zip(*runs, strict=True))


def test_triton_launch_counts_record_kernel_runs(tk):
    n = launch_counts["affine_act"]
    tk.affine_act(torch.randn(5, 3), torch.ones(3), torch.zeros(3), "relu")
    assert launch_counts["affine_act"] == n + 1


# ---------------------------------------------------------------- csrc (CPU build)
# (rtol, atol) of a result rounded once to the dtype vs the fp32 reference.
CSRC_TOL = {torch.float32: (1e-5, 2e-5), torch.bfloat16: (1.6e-2, 1.6e-2),
       torch.float16: (2e-3, 2e-3)}
SHAPES = [(1, 5, 3, 3), (3, 24, 5, 7), (2, 37, 8, 8), (5, 3, 1, 2)]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(scope="module")
def C():
    return native.load()


def _close(a, b, dtype, scale=1.0, what=""):
    rtol, atol = CSRC_TOL[dtype]
    torch.testing.assert_close(a.float(), b.float(), rtol=rtol, atol=atol * scale, msg=what)


def _make_bn(c, gen):
    bn = BatchNorm(c)
    with torch.no_grad():
        bn.bias.normal_(generator=gen)
        bn.weight.uniform_(0.5, 1.5, generator=gen)  # frozen but not 1: exercised
        bn.running_mean.normal_(generator=gen)
        bn.running_var.uniform_(0.5, 2.0, generator=gen)
    return bn


def _input(shape, dtype, cl, gen, offset=1.0):
    x = torch.randn(shape, generator=gen) * 2.0 + offset
    x = x.to(dtype)
    return x.contiguous(memory_format=torch.channels_last) if cl else x


@pytest.mark.parametrize("act", ["gelu", "relu", "silu"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cl", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_csrc_bn_act_dtypes_and_layouts_match_reference(act, dtype, cl, training):
    gen = torch.Generator().manual_seed(zlib.crc32(f"{act}{dtype}{cl}{training}".encode()))
    for shape in SHAPES:
        bn_ref, bn_ours = _make_bn(shape[1], gen), None
        bn_ours = BatchNorm(shape[1])
        bn_ours.load_state_dict(bn_ref.state_dict())
        bn_ref.train(training)
        bn_ours.train(training)
        x = _input(shape, dtype, cl, gen)
        # Reference in fp32 from the same (rounded) input and gradient.
        x_ref = x.float().clone().requires_grad_()
        x_ours = x.detach().clone().requires_grad_()
        y_ref = reference(x_ref, bn_ref, act)
        y = csrc_bn_act.bn_act(x_ours, bn_ours, act)
        assert y.dtype == dtype and y.shape == x.shape
        assert y.is_contiguous(memory_format=torch.channels_last) == cl or shape[2:] == (1, 1)
        _close(y, y_ref, dtype, what=f"y {shape}")
        g = torch.randn(shape, generator=gen).to(dtype)
        y_ref.backward(g.float())
        y.backward(g)
        gscale = float(x_ref.grad.abs().max()) + 1.0
        _close(x_ours.grad, x_ref.grad, dtype, scale=gscale, what=f"dx {shape}")
        n = x.numel() // shape[1]
        torch.testing.assert_close(bn_ours.bias.grad, bn_ref.bias.grad, rtol=1e-4,
                                   atol=1e-5 * n, msg=f"dbias {shape}")
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            torch.testing.assert_close(getattr(bn_ours, name), getattr(bn_ref, name),
                                       rtol=1e-5, atol=1e-6, msg=name)


def test_csrc_bn_statistics_survive_a_large_mean():
    """|mean| >> std: sums are shifted by a sample so E[x^2]-E[x]^2 does not cancel."""
    gen = torch.Generator().manual_seed(7)
    for cl in (False, True):
        x = _input((4, 16, 9, 9), torch.float32, cl, gen, offset=0.0) * 0.05 + 300.0
        bn_ref, bn_ours = BatchNorm(16), BatchNorm(16)
        y_ref = reference(x, bn_ref, "relu")
        y = csrc_bn_act.bn_act(x, bn_ours, "relu")
        torch.testing.assert_close(bn_ours.running_var, bn_ref.running_var, rtol=1e-4, atol=1e-7)
        # fp32 holds the mean only to ulp(300) / 2 = 1.5e-5, times invstd = 20,
        # so y can be 3e-4 off the exact value (torch's own channels_last
        # path is 1e-3 off): compare both with the fp64 truth.
        xd = x.double()
        mean = xd.mean((0, 2, 3), keepdim=True)
        var = xd.var((0, 2, 3), unbiased=False, keepdim=True)
        truth = torch.relu((xd - mean) / torch.sqrt(var + bn_ours.eps))
        torch.testing.assert_close(y.double(), truth, rtol=0, atol=6e-4)
        assert (y_ref.double() - truth).abs().max() < 2e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("cl", [0, 1], ids=["nchw", "nhwc"])
def test_csrc_bn_act_raw_calls_fill_every_poisoned_output(C, dtype, cl):
    gen = torch.Generator().manual_seed(11 + cl)
    n, c, h, w = 3, 19, 5, 3
    x = _input((n, c, h, w), dtype, cl, gen)
    weight = torch.rand(c, generator=gen) + 0.5
    bias = torch.randn(c, generator=gen)
    rm, rv = torch.randn(c, generator=gen), torch.rand(c, generator=gen) + 0.5
    y = torch.full_like(x, float("nan"))
    stats = torch.full((4 * c,), float("nan"))
    code = csrc_bn_act.DTYPE_CODES[dtype]
    C.bn_act_forward(code, x.data_ptr(), y.data_ptr(), stats.data_ptr(), weight.data_ptr(),
                     bias.data_ptr(), rm.data_ptr(), rv.data_ptr(), n, c, h * w, cl, 1, 1e-5,
                     0.1, activation("silu").code)
    assert not y.isnan().any() and not stats.isnan().any()
    xf = x.float()
    mean = xf.mean(dim=(0, 2, 3))
    var = xf.var(dim=(0, 2, 3), unbiased=False)
    torch.testing.assert_close(stats[:c], mean, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stats[c:2 * c], (var + 1e-5).rsqrt(), rtol=1e-4, atol=1e-5)
    ref = torch.nn.functional.silu((xf - mean[:, None, None]) * stats[c:2 * c, None, None]
                                   * weight[:, None, None] + bias[:, None, None])
    _close(y, ref, dtype)
    dy = torch.randn(x.shape, generator=gen).to(dtype)
    dy = dy.contiguous(memory_format=torch.channels_last) if cl else dy.contiguous()
    dx = torch.full_like(x, float("nan"))
    dw, db = torch.full((c,), float("nan")), torch.full((c,), float("nan"))
    C.bn_act_backward(code, x.data_ptr(), dy.data_ptr(), dx.data_ptr(), stats.data_ptr(),
                      dw.data_ptr(), db.data_ptr(), n, c, h * w, cl, 1, activation("silu").code)
    assert not dx.isnan().any() and not dw.isnan().any() and not db.isnan().any()


def test_csrc_fp16_bf16_conversions_match_torch_bit_for_bit(C):
    gen = torch.Generator().manual_seed(3)
    vals = torch.cat([
        torch.randn(20000, generator=gen) * 10.0 ** torch.randint(-9, 6, (20000,), generator=gen),
        torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 65504.0, 65519.0,
                      65520.0, 6.1e-5, 5.96e-8, 2.98e-8, 2.99e-8, 1e-30, -3e38, 3.4e38]),
        # exact ties in both formats: rounding must go to even
        (torch.arange(1, 2000, dtype=torch.float32) + 0.5) * 2.0 ** -10,
        torch.arange(256, 4096, dtype=torch.float32) + 0.5,
    ])
    for dtype in (torch.bfloat16, torch.float16):
        code = csrc_bn_act.DTYPE_CODES[dtype]
        out = torch.full(vals.shape, -1, dtype=torch.int16)
        C.float_to_16bit(code, vals.data_ptr(), out.data_ptr(), vals.numel())
        ref = vals.to(dtype).view(torch.int16)
        nan = vals.isnan()
        assert torch.equal(out[~nan], ref[~nan]), dtype
        back = torch.full(vals.shape, float("nan"))
        C.float_from_16bit(code, out.data_ptr(), back.data_ptr(), vals.numel())
        assert back[nan].isnan().all()
        assert torch.equal(back[~nan], ref[~nan].view(dtype).float()), dtype


def test_csrc_bn_act_passes_torch_opcheck():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn((2, 6, 3, 5), generator=gen, requires_grad=True)
    w, b = torch.rand(6, generator=gen) + 0.5, torch.randn(6, generator=gen, requires_grad=True)
    rm, rv = torch.zeros(6), torch.ones(6)
    torch.library.opcheck(csrc_bn_act.bn_act_fwd, (x, w, b, rm, rv, True, 1e-5, 0.1, "gelu"))
    torch.library.opcheck(csrc_bn_act.bn_act_fwd, (x, w, b, rm, rv, False, 1e-5, 0.1, "relu"))


def test_csrc_bn_act_raw_ops_reject_mismatched_inputs():
    x = torch.randn(2, 4, 3, 3)
    with pytest.raises(ValueError, match="weight has 3 values, x has 4 channels"):
        csrc_bn_act.bn_act_fwd(x, torch.ones(3), torch.zeros(4), None, None, True, 1e-5, 0.1, "relu")
    with pytest.raises(ValueError, match="stats must be"):
        csrc_bn_act.bn_act_bwd(x, x, torch.zeros(3), True, "relu")


def test_cifar_net_with_csrc_bn_act_matches_reference():
    from dawnbench_fast.models.cifar_net import CifarNet

    torch.manual_seed(0)
    ref = CifarNet(widths=(16, 24, 24))
    ours = CifarNet(widths=(16, 24, 24))
    ours.load_state_dict(ref.state_dict())
    for g in ours.groups:
        g.bn_act = csrc_bn_act.bn_act
    x = torch.randn(3, 3, 32, 32)
    out_ref, out = ref(x), ours(x)
    torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-5)
    out_ref.square().sum().backward()
    out.square().sum().backward()
    for (name, p_ref), p in zip(ref.named_parameters(), ours.parameters(), strict=True):
        if p_ref.grad is not None:
            torch.testing.assert_close(p.grad, p_ref.grad, rtol=1e-3, atol=1e-4, msg=name)


def test_training_steps_with_csrc_bn_act_and_augment_track_the_reference(monkeypatch):
    """The CIFAR trainer (bf16 autocast, channels_last) with our bn_act and
    augment swapped in for the reference ones: same losses within bf16 noise."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from support.cifar_data import cifar_dir

    from dawnbench_fast.cifar import Config
    from dawnbench_fast.training.train import loss_trajectory

    cfg = dataclasses.replace(Config(), subset=512, batch_size=128, widths=(16, 32, 32),
                              data_dir=str(cifar_dir()), download=False, kernels="torch",
                              whiten_images=512)
    ref = loss_trajectory(cfg, 6)
    for op in ("bn_act", "augment"):  # csrc's in place of the references, all else torch
        monkeypatch.setitem(dispatch.CATALOGUE, op, dataclasses.replace(
            dispatch.CATALOGUE[op], reference=f"dawnbench_fast.csrc.{op}.{op}"))
    ours = loss_trajectory(cfg, 6)
    assert ours[0] == pytest.approx(ref[0], rel=1e-2)
    np.testing.assert_allclose(ours, ref, rtol=5e-2)
