"""GEMM ops: ``matmul``, ``linear`` and ``newton_schulz`` for every backend
against the references (dawnbench_fast.newton_schulz, layer_ops.linear); then
the Triton tensor-core GEMM (``dawnbench::gemm`` with autograd, the
alpha*A@B + beta*D epilogue) in the interpreter: odd sizes, transposed
(strided) operands, forward and backward; and the CUDA C++ mma tiles through
their CPU emulation. fp32 uses IEEE dots here; bf16 is storage + conversion
only (no bf16 arithmetic in the interpreter)."""

from __future__ import annotations

import pytest
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import gemm as csrc_gemm
from dawnbench_fast.csrc import native
from dawnbench_fast.kernels import launch_counts
from dawnbench_fast.kernels.launches import poisoned_outputs
from dawnbench_fast.newton_schulz import NS_COEFFS

reference = dispatch.reference("newton_schulz")


pytestmark = pytest.mark.usefixtures("seed_from_test_id")


@pytest.fixture
def tk():
    """The Triton op module (skips where Triton is not installed)."""
    return pytest.importorskip("dawnbench_fast.kernels.gemm")


@pytest.fixture(scope="module")
def C():
    return native.load()


TOL = {torch.float32: (1e-5, 1e-4), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1e-2, 1e-2)}


@pytest.mark.parametrize("m,k,n", [(1, 7, 3), (33, 17, 45), (70, 40, 9)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_triton_gemm_forward(tk, m, k, n, dtype):
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    with poisoned_outputs():
        c = tk.gemm(a, b)
    want = a.float() @ b.float()
    rtol, atol = TOL[dtype]
    assert c.dtype == dtype
    torch.testing.assert_close(c.float(), want, rtol=rtol, atol=atol * k**0.5)


def test_matmul_strided_xxt_newton_schulz_product(implementation, device):
    op = implementation("matmul")
    x = torch.randn(20, 37, device=device)
    with poisoned_outputs():
        g = op(x, x.t())  # X @ X.T without a copy
    torch.testing.assert_close(g, x @ x.t(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_gemm_backward(tk, dtype):
    a = torch.randn(19, 23).to(dtype).requires_grad_(True)
    b = torch.randn(23, 11).to(dtype).requires_grad_(True)
    a_ref = a.detach().float().requires_grad_(True)
    b_ref = b.detach().float().requires_grad_(True)
    dc = torch.randn(19, 11)
    with poisoned_outputs():
        (tk.gemm(a, b).float() * dc).sum().backward()
    ((a_ref @ b_ref) * dc).sum().backward()
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(a.grad.float(), a_ref.grad, rtol=rtol, atol=atol * 5)
    torch.testing.assert_close(b.grad.float(), b_ref.grad, rtol=rtol, atol=atol * 5)


def test_linear_op_forward_backward(implementation, backend, device):
    op = implementation("linear")
    head = torch.nn.Linear(70, 10, bias=False).to(device)
    x = torch.randn(3, 70, device=device, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    before = launch_counts["gemm"]
    y = op(x, head.weight)
    dy = torch.randn(3, 10, device=device)
    (y * dy).sum().backward()
    g_w = head.weight.grad.clone()
    head.weight.grad = None
    (head(x_ref) * dy).sum().backward()
    torch.testing.assert_close(y, head(x_ref), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g_w, head.weight.grad, rtol=1e-5, atol=1e-5)
    if backend == "triton":
        assert launch_counts["gemm"] == before + 3  # forward, d input, d weight


def test_triton_gemm_bad_shapes_one_line_error(tk):
    with pytest.raises(ValueError, match="gemm needs"):
        tk.gemm(torch.randn(3, 4), torch.randn(5, 2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_gemm_axpby_epilogue(tk, dtype):
    a, b = torch.randn(21, 13).to(dtype), torch.randn(13, 30).to(dtype)
    d = torch.randn(21, 30).to(dtype)
    with poisoned_outputs():
        c = tk.gemm_axpby(a, b, d, -0.7, 2.5)
    want = -0.7 * (a.float() @ b.float()) + 2.5 * d.float()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(c.float(), want, rtol=tol, atol=tol * 4)


def _newton_schulz_fp32(g, steps, eps=1e-7):
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
def test_newton_schulz_matches_muon(implementation, backend, device, shape):
    """bf16 storage (fp32 arithmetic in the Triton interpreter: no bf16 math
    there): no further from the exact (fp64) iteration than the reference
    (Muon's own bf16 implementation) is."""
    op = implementation("newton_schulz")
    g = torch.randn(shape, device=device)
    before = launch_counts["gemm_axpby"]
    with poisoned_outputs():
        got = op(g, 3)
    want = reference(g, 3)
    exact = _newton_schulz_fp32(g, 3)
    assert got.dtype == want.dtype == torch.bfloat16 and got.shape == want.shape
    err = (got.float() - exact).abs().max().item()
    ref_err = (want.float() - exact).abs().max().item()
    assert err <= 1.5 * ref_err + 2e-3, (err, ref_err)
    if backend == "triton":
        assert launch_counts["gemm_axpby"] == before + 6  # two fused products per iteration


# ---------------------------------------------------------------- csrc GEMM tiles (CPU emulation of mma)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
# (M, N, K, stages staged with 16-byte copies): full aligned tiles take the
# vector path, edges and strides that are not multiples of 8 the scalar one.
@pytest.mark.parametrize("mnk", [(1, 1, 1, 0), (17, 9, 33, 0), (64, 64, 32, 1),
                                 (130, 70, 100, 0), (136, 72, 104, 6)])
def test_csrc_gemm_tiles_with_emulated_mma_match_matmul(C, dtype, mnk):
    m, n, k, vec_stages = mnk
    gen = torch.Generator().manual_seed(m * 1000 + n * 10 + k)
    a = torch.randn((m, k), generator=gen).to(dtype)
    b = torch.randn((k, n), generator=gen).to(dtype)
    c = torch.full((m, n), float("nan"))
    got = C.gemm_mma_emulated(csrc_gemm.DTYPE_CODES[dtype], a.data_ptr(), b.data_ptr(), c.data_ptr(),
                              m, n, k, k, n, n)
    assert got == vec_stages
    ref = a.double() @ b.double()  # 16-bit products are exact; only the sum order differs
    torch.testing.assert_close(c.double(), ref, rtol=1e-5, atol=1e-5 * k)
    # through the custom op, with a strided (transposed) operand
    bt = b.t().contiguous().t()
    torch.testing.assert_close(csrc_gemm.gemm_mma(a, bt).double(), ref, rtol=1e-5, atol=1e-5 * k)


def test_csrc_gemm_mma_passes_torch_opcheck():
    gen = torch.Generator().manual_seed(1)
    a16 = torch.randn((5, 7), generator=gen).half()
    torch.library.opcheck(csrc_gemm.gemm_mma, (a16, torch.randn((7, 3), generator=gen).half()))
