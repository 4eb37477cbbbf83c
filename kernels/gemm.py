"""The GEMM ops on Triton: ``linear``, ``matmul`` and ``newton_schulz`` (Muon's
orthogonalisation) on one tensor-core GEMM with an alpha*A@B + beta*D
epilogue. Start here: this module holds the custom ops, the GEMM's autograd
and the dispatch registrations, and imports the kernel and the references.

Faces of the ops:
- references: :func:`dawnbench_fast.layer_ops.linear`,
  :func:`dawnbench_fast.newton_schulz.matmul` and
  :func:`dawnbench_fast.newton_schulz.newton_schulz` (backend ``torch``), and
  :func:`gemm_reference` beside the kernel;
- Triton (this module): the autotuned kernel of :mod:`.gemm_kernel`, as the
  custom ops ``dawnbench::gemm`` (with autograd) and ``dawnbench::gemm_axpby``;
- CUDA C++: csrc/gemm.py (``dawnbench::csrc_gemm_mma``, mma.sync tiles),
  not registered for any op (on an H200 it took 0.10-0.15 ms where cuBLAS took
  6-8 us at the Newton-Schulz shapes: docs/PERFORMANCE.md);
- CPU: the C++ build of that GEMM is an mma emulation for tests, never
  registered; ``--kernels cpu`` serves the references.
Tests: tests/ops/test_gemm.py. Costs: kernels/gemm_costs.py.
"""

from __future__ import annotations

import torch

from dawnbench_fast import dispatch
from dawnbench_fast.kernels import launches as L
from dawnbench_fast.kernels.gemm_costs import COSTS
from dawnbench_fast.kernels.gemm_kernel import gemm_autotuned, gemm_reference
from dawnbench_fast.kernels.launches import needs_f32_math, new_output, record
from dawnbench_fast.layer_ops import linear as linear_reference
from dawnbench_fast.newton_schulz import NS_COEFFS, ns_start
from dawnbench_fast.newton_schulz import matmul as matmul_reference
from dawnbench_fast.newton_schulz import newton_schulz as newton_schulz_reference
from dawnbench_fast.roofline.registry import register_flop_formulas

__all__ = ["gemm", "gemm_axpby", "gemm_reference", "linear", "linear_reference", "matmul",
           "matmul_reference", "newton_schulz", "newton_schulz_reference"]


@torch.library.custom_op("dawnbench::gemm", mutates_args=())
def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [M, K] @ b [K, N] (any strides), fp32 accumulation, output in a's dtype."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"dawnbench::gemm needs [M, K] @ [K, N], got {tuple(a.shape)} @ {tuple(b.shape)}")
    M, K = a.shape
    N = b.shape[1]
    if max(M * a.stride(0), K * a.stride(1), K * b.stride(0), N * b.stride(1), M * N) >= 2**31:
        raise ValueError("dawnbench::gemm uses 32-bit offsets; split operands over 2**31 elements")
    b = b.to(a.dtype)
    c = new_output((M, N), a.dtype, a.device)

    def grid(meta):
        return (L.cdiv(M, meta["BLOCK_M"]) * L.cdiv(N, meta["BLOCK_N"]),)

    gemm_autotuned[grid](a, b, c, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                         c.stride(0), c.stride(1), 0, 0, 1.0, 0.0, HAS_D=False,
                         F32_MATH=needs_f32_math(a.dtype),
                         DOT_PRECISION=L.dot_precision(a.dtype, conv=False))
    record("gemm")
    return c


@gemm.register_fake
def _(a, b):
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.custom_op("dawnbench::gemm_axpby", mutates_args=())
def gemm_axpby(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, alpha: float,
               beta: float) -> torch.Tensor:
    """alpha * (a @ b) + beta * d in one kernel (no autograd: optimizer math)."""
    M, K = a.shape
    N = b.shape[1]
    if b.shape[0] != K or tuple(d.shape) != (M, N):
        raise ValueError(f"dawnbench::gemm_axpby needs [M, K] @ [K, N] + [M, N], got "
                         f"{tuple(a.shape)} @ {tuple(b.shape)} + {tuple(d.shape)}")
    c = new_output((M, N), a.dtype, a.device)

    def grid(meta):
        return (L.cdiv(M, meta["BLOCK_M"]) * L.cdiv(N, meta["BLOCK_N"]),)

    b, d = b.to(a.dtype), d.to(a.dtype)
    gemm_autotuned[grid](a, b, c, d, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                         c.stride(0), c.stride(1), d.stride(0), d.stride(1), float(alpha),
                         float(beta), HAS_D=True, F32_MATH=needs_f32_math(a.dtype),
                         DOT_PRECISION=L.dot_precision(a.dtype, conv=False))
    record("gemm_axpby")
    return c


@gemm_axpby.register_fake
def _(a, b, d, alpha, beta):
    return a.new_empty((a.shape[0], b.shape[1]))


def _gemm_setup(ctx, inputs, output):
    a, b = inputs
    ctx.save_for_backward(a, b)
    ctx.b_dtype = b.dtype


def _gemm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad = grad.to(a.dtype)
    da = gemm(grad, b.to(a.dtype).t()) if ctx.needs_input_grad[0] else None
    db = gemm(a.t(), grad).to(ctx.b_dtype) if ctx.needs_input_grad[1] else None
    return da, db


gemm.register_autograd(_gemm_backward, setup_context=_gemm_setup)


# -- the ops -----------------------------------------------------------------
@dispatch.register("linear", "triton")
def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [*, K] @ weight[N, K].T on the Triton GEMM (autocast-aware)."""
    dtype = L.compute_dtype(x)
    lead = x.shape[:-1]
    y = gemm(x.reshape(-1, x.shape[-1]).to(dtype), weight.to(dtype).t())
    return y.view(*lead, weight.shape[0])


@dispatch.register("matmul", "triton")
def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """2-D a @ b on the Triton GEMM, e.g. Newton-Schulz's X @ X.T (pass X.T:
    strides make the transpose free)."""
    return gemm(a, b)


@dispatch.register("newton_schulz", "triton")
@torch.no_grad()
def newton_schulz(g: torch.Tensor, steps: int = 3, eps: float = 1e-7,
                  coeffs: tuple[float, float, float] = NS_COEFFS) -> torch.Tensor:
    """Muon's quintic Newton-Schulz orthogonalisation in bf16 on the Triton GEMM,
    three kernels per iteration: G = X X^T; P = c G G + b G; X = P X + a X
    (the element-wise terms ride in the GEMM epilogue). Same contract as the
    reference (2-D input, bf16 result)."""
    a, b, c = coeffs
    x, transposed = ns_start(g, eps)
    for _ in range(steps):
        gram = gemm(x, x.T)
        poly = gemm_axpby(gram, gram, gram, c, b)
        x = gemm_axpby(poly, x, x, 1.0, a)
    return x.T if transposed else x


# The roofline's FLOP/byte formulas of these ops (kernels/gemm_costs.py), also for FlopCounterMode:
# registered after the definitions, because torch attaches formulas to existing ops only.

register_flop_formulas(COSTS)
