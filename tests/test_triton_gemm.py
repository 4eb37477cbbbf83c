"""Tensor-core GEMM against torch.matmul in the Triton interpreter: odd sizes,
transposed (strided) operands, forward and backward, the ``linear`` and
``matmul`` ops. fp32 uses IEEE dots here; bf16 is storage + conversion only
(no bf16 arithmetic in the interpreter)."""

import zlib

import pytest
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.kernels import custom_ops, launch_counts
from dawnbench_fast.kernels.launches import poisoned_outputs


@pytest.fixture(autouse=True)
def _seed(request):
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


TOL = {torch.float32: (1e-5, 1e-4), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1e-2, 1e-2)}


@pytest.mark.parametrize("m,k,n", [(1, 7, 3), (33, 17, 45), (70, 40, 9)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gemm_forward(m, k, n, dtype):
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    with poisoned_outputs():
        c = custom_ops.gemm(a, b)
    want = a.float() @ b.float()
    rtol, atol = TOL[dtype]
    assert c.dtype == dtype
    torch.testing.assert_close(c.float(), want, rtol=rtol, atol=atol * k**0.5)


def test_gemm_strided_xxt_newton_schulz_product():
    x = torch.randn(20, 37)
    with poisoned_outputs():
        g = dispatch.get_op("matmul", "triton")(x, x.t())  # X @ X.T without a copy
    torch.testing.assert_close(g, x @ x.t(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_gemm_backward(dtype):
    a = torch.randn(19, 23).to(dtype).requires_grad_(True)
    b = torch.randn(23, 11).to(dtype).requires_grad_(True)
    a_ref = a.detach().float().requires_grad_(True)
    b_ref = b.detach().float().requires_grad_(True)
    dc = torch.randn(19, 11)
    with poisoned_outputs():
        (custom_ops.gemm(a, b).float() * dc).sum().backward()
    ((a_ref @ b_ref) * dc).sum().backward()
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(a.grad.float(), a_ref.grad, rtol=rtol, atol=atol * 5)
    torch.testing.assert_close(b.grad.float(), b_ref.grad, rtol=rtol, atol=atol * 5)


def test_linear_op_forward_backward():
    head = torch.nn.Linear(70, 10, bias=False)
    x = torch.randn(3, 70, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    before = launch_counts["gemm"]
    y = dispatch.get_op("linear", "triton")(x, head.weight)
    dy = torch.randn(3, 10)
    (y * dy).sum().backward()
    g_w = head.weight.grad.clone()
    head.weight.grad = None
    (head(x_ref) * dy).sum().backward()
    torch.testing.assert_close(y, head(x_ref), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g_w, head.weight.grad, rtol=1e-5, atol=1e-5)
    assert launch_counts["gemm"] == before + 3  # forward, d input, d weight


def test_gemm_bad_shapes_one_line_error():
    with pytest.raises(ValueError, match="gemm needs"):
        custom_ops.gemm(torch.randn(3, 4), torch.randn(5, 2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemm_axpby_epilogue(dtype):
    a, b = torch.randn(21, 13).to(dtype), torch.randn(13, 30).to(dtype)
    d = torch.randn(21, 30).to(dtype)
    with poisoned_outputs():
        c = custom_ops.gemm_axpby(a, b, d, -0.7, 2.5)
    want = -0.7 * (a.float() @ b.float()) + 2.5 * d.float()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(c.float(), want, rtol=tol, atol=tol * 4)


def _newton_schulz_fp32(g, steps, eps=1e-7):
    from dawnbench_fast.optim.muon import NS_COEFFS

    a, b, c = NS_COEFFS
    x = g.double()
    x = x / (x.norm() + eps)
    t = x.size(0) > x.size(1)
    x = x.T if t else x
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return (x.T if t else x).float()


@pytest.mark.parametrize("shape", [(24, 40), (45, 18)])  # wide and tall (transposed) filters
def test_newton_schulz_matches_muon(shape):
    """bf16 storage (fp32 arithmetic in the interpreter: no bf16 math there):
    no further from the exact (fp64) iteration than the optimizer's own bf16
    implementation is."""
    from dawnbench_fast.optim.muon import newton_schulz as reference

    g = torch.randn(shape)
    before = launch_counts["gemm_axpby"]
    with poisoned_outputs():
        got = dispatch.get_op("newton_schulz", "triton")(g, 3)
    want = reference(g, 3)
    exact = _newton_schulz_fp32(g, 3)
    assert got.dtype == want.dtype == torch.bfloat16 and got.shape == want.shape
    err = (got.float() - exact).abs().max().item()
    ref_err = (want.float() - exact).abs().max().item()
    assert err <= 1.5 * ref_err + 2e-3, (err, ref_err)
    assert launch_counts["gemm_axpby"] == before + 6  # two fused products per iteration
