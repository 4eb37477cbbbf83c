"""Muon's orthogonalisation as an op: the quintic Newton-Schulz coefficients,
the starting point every backend shares, and the PyTorch references of the
``newton_schulz`` op and of the ``matmul`` it runs on (dispatch.CATALOGUE).

Why here, beside vocabulary.py and not in optim/: the optimizer (Muon's
default) and the Triton kernels (kernels/gemm.py, the same iteration on our
GEMM) both need ``ns_start`` and the reference, and kernels never import the
optimizer. This module imports only torch, so both floors can read it.
"""

from __future__ import annotations

import torch

# Quintic Newton-Schulz coefficients: pushes singular values of a normalised
# matrix towards 1 in few iterations (tuned for speed, not exact convergence).
NS_COEFFS = (3.4445, -4.7750, 2.0315)


def ns_start(g: torch.Tensor, eps: float = 1e-7) -> tuple[torch.Tensor, bool]:
    """Newton-Schulz's starting point, shared by every backend: bf16, spectral
    norm <= 1 (Frobenius-normalised), in the wide orientation so that X X^T is
    the small Gram matrix. Returns (X, whether it was transposed)."""
    x = g.bfloat16()
    x = x / (x.norm() + eps)
    transposed = x.size(0) > x.size(1)
    return (x.T if transposed else x), transposed


def newton_schulz(g: torch.Tensor, steps: int = 3, eps: float = 1e-7) -> torch.Tensor:
    """Approximately orthogonalise a 2-D matrix (U V^T of its SVD), in bf16."""
    x, transposed = ns_start(g, eps)
    x = quintic(x, steps)
    return x.T if transposed else x


def quintic(x: torch.Tensor, steps: int) -> torch.Tensor:
    """``steps`` quintic iterations from the wide, normalised ``x`` ([..., M, N], M <= N)."""
    a, b, c = NS_COEFFS
    for _ in range(steps):
        gram = x @ x.mT
        poly = b * gram + c * (gram @ gram)
        x = a * x + poly @ x
    return x


def newton_schulz_batched(g: torch.Tensor, steps: int = 3, eps: float = 1e-7) -> torch.Tensor:
    """:func:`newton_schulz` of each matrix of a batch [B, M, N] in one chain
    of batched products (Muon's banks of one shape on the GPU). Each
    matrix's own norm; on the CPU the results may differ from the 2-D
    function's in the last bf16 bit (oneDNN splits a batched product's sums
    otherwise), which is why the CPU step orthogonalises bank by bank."""
    x = g.bfloat16()
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + eps)
    transposed = x.size(-2) > x.size(-1)
    x = quintic(x.mT if transposed else x, steps)
    return x.mT if transposed else x


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """2-D a @ b, the product Newton-Schulz's iteration is made of."""
    return a @ b
