"""The CPU (OpenMP) build of csrc's shared __host__ __device__ math against the
PyTorch references: fresh random inputs, outputs poisoned with NaN before each
call, odd sizes, forward and backward, tolerances per dtype."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from dawnbench_fast.csrc import native, ops
from dawnbench_fast.data import augment as A
from dawnbench_fast.models.layers import BatchNorm, bn_act

# (rtol, atol) of a result rounded once to the dtype vs the fp32 reference.
TOL = {torch.float32: (1e-5, 2e-5), torch.bfloat16: (1.6e-2, 1.6e-2),
       torch.float16: (2e-3, 2e-3)}
SHAPES = [(1, 5, 3, 3), (3, 24, 5, 7), (2, 37, 8, 8), (5, 3, 1, 2)]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(scope="module")
def C():
    return native.load()


def _close(a, b, dtype, scale=1.0, what=""):
    rtol, atol = TOL[dtype]
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
def test_bn_act_forward_backward_matches_reference(act, dtype, cl, training):
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
        y_ref = bn_act(x_ref, bn_ref, act)
        y = ops.bn_act(x_ours, bn_ours, act)
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


def test_bn_statistics_survive_a_large_mean():
    """|mean| >> std: sums are shifted by a sample so E[x^2]-E[x]^2 does not cancel."""
    gen = torch.Generator().manual_seed(7)
    for cl in (False, True):
        x = _input((4, 16, 9, 9), torch.float32, cl, gen, offset=0.0) * 0.05 + 300.0
        bn_ref, bn_ours = BatchNorm(16), BatchNorm(16)
        y_ref = bn_act(x, bn_ref, "relu")
        y = ops.bn_act(x, bn_ours, "relu")
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
def test_bn_act_raw_calls_fill_every_poisoned_output(C, dtype, cl):
    gen = torch.Generator().manual_seed(11 + cl)
    n, c, h, w = 3, 19, 5, 3
    x = _input((n, c, h, w), dtype, cl, gen)
    weight = torch.rand(c, generator=gen) + 0.5
    bias = torch.randn(c, generator=gen)
    rm, rv = torch.randn(c, generator=gen), torch.rand(c, generator=gen) + 0.5
    y = torch.full_like(x, float("nan"))
    stats = torch.full((4 * c,), float("nan"))
    code = ops.DTYPE_CODES[dtype]
    C.bn_act_forward(code, x.data_ptr(), y.data_ptr(), stats.data_ptr(), weight.data_ptr(),
                     bias.data_ptr(), rm.data_ptr(), rv.data_ptr(), n, c, h * w, cl, 1, 1e-5,
                     0.1, ops.ACT_CODES["silu"])
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
                      dw.data_ptr(), db.data_ptr(), n, c, h * w, cl, 1, ops.ACT_CODES["silu"])
    assert not dx.isnan().any() and not dw.isnan().any() and not db.isnan().any()


def test_fp16_bf16_conversions_match_torch_bit_for_bit(C):
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
        code = ops.DTYPE_CODES[dtype]
        out = torch.full(vals.shape, -1, dtype=torch.int16)
        C.float_to_16bit(code, vals.data_ptr(), out.data_ptr(), vals.numel())
        ref = vals.to(dtype).view(torch.int16)
        nan = vals.isnan()
        assert torch.equal(out[~nan], ref[~nan]), dtype
        back = torch.full(vals.shape, float("nan"))
        C.float_from_16bit(code, out.data_ptr(), back.data_ptr(), vals.numel())
        assert back[nan].isnan().all()
        assert torch.equal(back[~nan], ref[~nan].view(dtype).float()), dtype


# ---------------------------------------------------------------- augment
MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)


@pytest.mark.parametrize("cutout", [0, 8])
@pytest.mark.parametrize("batch", [1, 37])
def test_augment_is_bit_identical_to_reference(cutout, batch):
    rng = np.random.default_rng(batch + cutout)
    images = rng.integers(0, 256, size=(50, 32, 32, 3), dtype=np.uint8)
    padded = torch.from_numpy(A.pad_reflect(images, 2))
    scale, shift = (torch.from_numpy(a) for a in A.normalisation(MEAN, STD))
    for epoch in (0, 1):
        idx = torch.from_numpy(rng.choice(50, size=batch, replace=False))
        p = A.augment_params(int(rng.integers(1 << 30)), epoch, idx.numpy(), cutout=cutout)
        ref = A.augment_torch(padded, idx, p, scale, shift)
        out = ops.augment(padded, idx, p, scale, shift)
        assert out.shape == ref.shape and out.dtype == torch.float32
        assert out.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(out, ref)
        out16 = ops.augment(padded, idx, p, scale, shift, out_dtype=torch.bfloat16)
        assert torch.equal(out16, ref.to(torch.bfloat16))


def test_augment_raw_call_fills_poisoned_output_any_channel_count(C):
    """Five channels and an odd padding: the kernel takes any C."""
    rng = np.random.default_rng(5)
    padded = torch.from_numpy(rng.integers(0, 256, size=(9, 13, 15, 5), dtype=np.uint8))
    scale = torch.rand(5) + 0.1
    shift = torch.randn(5)
    b, size = 4, 11
    idx = torch.from_numpy(rng.integers(0, 9, size=b)).long()
    prm = torch.stack([torch.randint(0, 5, (b,)), torch.randint(0, 3, (b,)),
                       torch.randint(0, 2, (b,)), torch.randint(0, 8, (b,)),
                       torch.randint(0, 8, (b,))], 1).int()
    out = torch.full((b, size, size, 5), float("nan"))
    C.augment(0, padded.data_ptr(), idx.data_ptr(), prm.data_ptr(), scale.data_ptr(),
              shift.data_ptr(), out.data_ptr(), b, 13, 15, 5, size, 3)
    for k in range(b):
        ox, oy, fl, cx, cy = prm[k].tolist()
        crop = padded[idx[k], oy:oy + size, ox:ox + size].float()
        if fl:
            crop = crop.flip(1)
        ref = crop * scale + shift
        ref[cy:cy + 3, cx:cx + 3] = 0.0
        assert torch.equal(out[k], ref), k


def test_augment_rejects_offsets_outside_the_padding():
    padded = torch.zeros((2, 36, 36, 3), dtype=torch.uint8)
    p = A.augment_params(0, 0, np.array([0, 1]))
    p.ox[0] = 9
    with pytest.raises(ValueError, match="ox offsets"):
        ops.augment(padded, torch.tensor([0, 1]), p, torch.ones(3), torch.zeros(3))


# ---------------------------------------------------------------- GEMM tiles
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
# (M, N, K, stages staged with 16-byte copies): full aligned tiles take the
# vector path, edges and strides that are not multiples of 8 the scalar one.
@pytest.mark.parametrize("mnk", [(1, 1, 1, 0), (17, 9, 33, 0), (64, 64, 32, 1),
                                 (130, 70, 100, 0), (136, 72, 104, 6)])
def test_gemm_tiles_with_emulated_mma_match_matmul(C, dtype, mnk):
    m, n, k, vec_stages = mnk
    gen = torch.Generator().manual_seed(m * 1000 + n * 10 + k)
    a = torch.randn((m, k), generator=gen).to(dtype)
    b = torch.randn((k, n), generator=gen).to(dtype)
    c = torch.full((m, n), float("nan"))
    got = C.gemm_mma_emulated(ops.DTYPE_CODES[dtype], a.data_ptr(), b.data_ptr(), c.data_ptr(),
                              m, n, k, k, n, n)
    assert got == vec_stages
    ref = a.double() @ b.double()  # 16-bit products are exact; only the sum order differs
    torch.testing.assert_close(c.double(), ref, rtol=1e-5, atol=1e-5 * k)
    # through the custom op, with a strided (transposed) operand
    bt = b.t().contiguous().t()
    torch.testing.assert_close(ops.gemm_mma(a, bt).double(), ref, rtol=1e-5, atol=1e-5 * k)


# ---------------------------------------------------------------- integration
def test_custom_ops_pass_torch_opcheck():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn((2, 6, 3, 5), generator=gen, requires_grad=True)
    w, b = torch.rand(6, generator=gen) + 0.5, torch.randn(6, generator=gen, requires_grad=True)
    rm, rv = torch.zeros(6), torch.ones(6)
    torch.library.opcheck(ops.bn_act_fwd, (x, w, b, rm, rv, True, 1e-5, 0.1, "gelu"))
    torch.library.opcheck(ops.bn_act_fwd, (x, w, b, rm, rv, False, 1e-5, 0.1, "relu"))
    a16 = torch.randn((5, 7), generator=gen).half()
    torch.library.opcheck(ops.gemm_mma, (a16, torch.randn((7, 3), generator=gen).half()))


def test_cifar_net_with_csrc_bn_act_matches_reference():
    from dawnbench_fast.models.cifar_net import CifarNet

    torch.manual_seed(0)
    ref = CifarNet(widths=(16, 24, 24))
    ours = CifarNet(widths=(16, 24, 24))
    ours.load_state_dict(ref.state_dict())
    for g in ours.groups:
        g.bn_act = ops.bn_act
    x = torch.randn(3, 3, 32, 32)
    out_ref, out = ref(x), ours(x)
    torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-5)
    out_ref.square().sum().backward()
    out.square().sum().backward()
    for (name, p_ref), p in zip(ref.named_parameters(), ours.parameters(), strict=True):
        if p_ref.grad is not None:
            torch.testing.assert_close(p.grad, p_ref.grad, rtol=1e-3, atol=1e-4, msg=name)


def test_cpu_backend_registration_takes_the_measured_ops():
    from dawnbench_fast import dispatch
    from dawnbench_fast.csrc import cpu_ops

    assert cpu_ops.REASON is None
    assert dispatch._IMPLS[("bn_act", "cpu")] is ops.bn_act
    assert dispatch._IMPLS[("augment", "cpu")] is ops.augment
    assert ("gemm", "cpu") not in dispatch._IMPLS  # the emulated GEMM is for tests only


def test_training_steps_with_csrc_ops_track_the_reference(monkeypatch):
    """The CIFAR trainer (bf16 autocast, channels_last) with our bn_act and
    augment swapped in for the reference ones: same losses within bf16 noise."""
    import dataclasses
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from cifar_data import cifar_dir

    from dawnbench_fast import dispatch
    from dawnbench_fast.cifar import Config, loss_trajectory

    cfg = dataclasses.replace(Config(), subset=512, batch_size=128, widths=(16, 32, 32),
                              data_dir=str(cifar_dir()), download=False, kernels="torch",
                              whiten_images=512)
    ref = loss_trajectory(cfg, 6)
    monkeypatch.setitem(dispatch._IMPLS, ("bn_act", "torch"), ops.bn_act)
    monkeypatch.setitem(dispatch._IMPLS, ("augment", "torch"), ops.augment)
    ours = loss_trajectory(cfg, 6)
    assert ours[0] == pytest.approx(ref[0], rel=1e-2)
    np.testing.assert_allclose(ours, ref, rtol=5e-2)


def test_profiler_sees_the_custom_ops_and_roofline_has_their_costs():
    from torch.profiler import ProfilerActivity, profile

    from dawnbench_fast.csrc import costs as csrc_costs

    roofline_costs = pytest.importorskip("dawnbench_fast.roofline.costs")
    x = torch.randn(4, 8, 5, 5, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        ops.bn_act(x, BatchNorm(8), "gelu").sum().backward()
    names = {e.name for e in prof.events()}
    assert {"dawnbench::csrc_bn_act_fwd", "dawnbench::csrc_bn_act_bwd"} <= names
    for name in csrc_costs.COSTS:
        assert roofline_costs.has_cost(name), name
    flops, nbytes = csrc_costs.bn_act_fwd_cost([[4, 8, 5, 5], [8], [8], [8], [8]],
                                               ["float"] * 5, [None] * 8 + ["'relu'"])
    assert flops == (3 + 2 + 1) * 800 and nbytes == 2 * 800 * 4 + 6 * 4 * 8
    assert csrc_costs.gemm_mma_cost([[64, 32], [32, 16]], ["c10::Half"] * 2) == (
        2 * 64 * 16 * 32, 64 * 32 * 2 + 32 * 16 * 2 + 64 * 16 * 4)


def test_raw_pointer_ops_reject_mismatched_inputs():
    x = torch.randn(2, 4, 3, 3)
    with pytest.raises(ValueError, match="weight has 3 values, x has 4 channels"):
        ops.bn_act_fwd(x, torch.ones(3), torch.zeros(4), None, None, True, 1e-5, 0.1, "relu")
    with pytest.raises(ValueError, match="stats must be"):
        ops.bn_act_bwd(x, x, torch.zeros(3), True, "relu")
    padded = torch.zeros((2, 36, 36, 3), dtype=torch.uint8)
    prm = torch.zeros((2, 5), dtype=torch.int32)
    with pytest.raises(IndexError, match="indices 0..2 outside"):
        ops.augment_op(padded, torch.tensor([0, 2]), prm, torch.ones(3), torch.zeros(3), 32, 0,
                       torch.float32)
    with pytest.raises(ValueError, match="params must be"):
        ops.augment_op(padded, torch.tensor([0, 1]), prm[:1], torch.ones(3), torch.zeros(3), 32,
                       0, torch.float32)
