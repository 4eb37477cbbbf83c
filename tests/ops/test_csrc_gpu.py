"""The CUDA C++ kernels on a GPU, through each engine that can run here (the
built extension and CuPy/NVRTC), against the PyTorch references. Skipped
without CUDA (this project's CPU-only CI); run on a GPU machine with
``python -m pytest tests/ops/test_csrc_gpu.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dawnbench_fast.csrc import augment as csrc_augment
from dawnbench_fast.csrc import bn_act as csrc_bn_act
from dawnbench_fast.csrc import cupy_path
from dawnbench_fast.csrc import engine as csrc_engine
from dawnbench_fast.csrc import gemm as csrc_gemm
from dawnbench_fast.data import augment as A
from dawnbench_fast.models.layers import BatchNorm, bn_act

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TOL = {torch.float32: (1e-5, 3e-5), torch.bfloat16: (1.6e-2, 1.6e-2),
       torch.float16: (2e-3, 2e-3)}


def _engines():
    out = []
    if torch.cuda.is_available():
        if csrc_engine._extension_reason() is None:
            out.append("extension")
        if cupy_path.unavailable_reason() is None:
            out.append("cupy")
    return out or ["none"]


@pytest.fixture(params=_engines())
def engine(request, monkeypatch):
    if request.param == "none":
        pytest.skip("neither the built extension nor CuPy can run here")
    monkeypatch.setattr(csrc_engine, "_ENGINE", {"cuda": request.param})
    return request.param


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("cl", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_bn_act_on_gpu(engine, dtype, cl, training):
    gen = torch.Generator(device="cuda").manual_seed(5)
    for shape in [(1, 5, 3, 3), (3, 37, 5, 7), (64, 256, 8, 8)]:
        for act in ("gelu", "relu", "silu"):
            bn_ref = BatchNorm(shape[1]).cuda().train(training)
            with torch.no_grad():
                bn_ref.bias.normal_(generator=gen)
                bn_ref.running_var.uniform_(0.5, 2, generator=gen)
            bn = BatchNorm(shape[1]).cuda().train(training)
            bn.load_state_dict(bn_ref.state_dict())
            x = (torch.randn(shape, device="cuda", generator=gen) * 2 + 1).to(dtype)
            if cl:
                x = x.contiguous(memory_format=torch.channels_last)
            x_ref = x.float().clone().requires_grad_()
            x_ours = x.detach().clone().requires_grad_()
            y_ref, y = bn_act(x_ref, bn_ref, act), csrc_bn_act.bn_act(x_ours, bn, act)
            rtol, atol = TOL[dtype]
            torch.testing.assert_close(y.float(), y_ref, rtol=rtol, atol=atol)
            g = torch.randn(shape, device="cuda", generator=gen).to(dtype)
            y_ref.backward(g.float())
            y.backward(g)
            scale = float(x_ref.grad.abs().max()) + 1
            torch.testing.assert_close(x_ours.grad.float(), x_ref.grad, rtol=rtol,
                                       atol=atol * scale)
            n = x.numel() // shape[1]
            torch.testing.assert_close(bn.bias.grad, bn_ref.bias.grad, rtol=1e-4, atol=1e-5 * n)
            torch.testing.assert_close(bn.running_var, bn_ref.running_var, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cutout", [0, 12])
def test_augment_on_gpu_is_bit_identical(engine, cutout):
    rng = np.random.default_rng(cutout)
    images = rng.integers(0, 256, size=(300, 32, 32, 3), dtype=np.uint8)
    padded = A.pad_reflect(torch.from_numpy(images), 2).cuda()
    scale, shift = (torch.from_numpy(a).cuda() for a in A.normalisation((0.5,) * 3, (0.25,) * 3))
    for batch in (1, 257):
        idx = torch.from_numpy(rng.choice(300, size=batch, replace=False)).cuda()
        p = A.augment_params(9, 3, idx.cpu().numpy(), cutout=cutout)
        ref = A.augment_torch(padded, idx, p, scale, shift)
        assert torch.equal(csrc_augment.augment(padded, idx, p, scale, shift), ref)
        out16 = csrc_augment.augment(padded, idx, p, scale, shift, out_dtype=torch.bfloat16)
        assert torch.equal(out16, ref.to(torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mnk", [(1, 1, 1), (17, 9, 33), (130, 70, 100), (1024, 512, 768)])
def test_gemm_mma_on_gpu(engine, dtype, mnk):
    m, n, k = mnk
    gen = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = torch.randn((m, k), device="cuda", generator=gen).to(dtype)
    b = torch.randn((k, n), device="cuda", generator=gen).to(dtype)
    ref = a.double() @ b.double()
    out = csrc_gemm.gemm_mma(a, b)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-4 * k ** 0.5 * 4)
