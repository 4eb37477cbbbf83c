"""Muon: momentum whose update is orthogonalised by a Newton-Schulz iteration.

Used on the 4-D conv filters of the CIFAR net. Each step (a) renormalises the
filter bank to Frobenius norm sqrt(out_channels), so that weight growth cannot
shrink the effective learning rate, then (b) applies the orthogonalised
Nesterov momentum.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from dawnbench_fast.dispatch import register

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


@register("newton_schulz", "torch")
def newton_schulz(g: torch.Tensor, steps: int = 3, eps: float = 1e-7) -> torch.Tensor:
    """Approximately orthogonalise a 2-D matrix (U V^T of its SVD), in bf16."""
    a, b, c = NS_COEFFS
    x, transposed = ns_start(g, eps)
    for _ in range(steps):
        gram = x @ x.T
        poly = b * gram + c * (gram @ gram)
        x = a * x + poly @ x
    return x.T if transposed else x


class Muon(torch.optim.Optimizer):
    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float = 0.24,
        momentum: float = 0.6,
        nesterov: bool = True,
        ns_steps: int = 3,
        orthogonalize: Callable[[torch.Tensor, int], torch.Tensor] = newton_schulz,
    ):
        """``orthogonalize(g2d, steps)`` is the backend's Newton-Schulz
        (``dispatch.get_op("newton_schulz", backend)``)."""
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps))
        self.orthogonalize = orthogonalize

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 - torch.optim signature
        for group in self.param_groups:
            lr, mom = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad)
                buf = state["momentum_buffer"]
                buf.mul_(mom).add_(p.grad)
                g = p.grad.add(buf, alpha=mom) if group["nesterov"] else buf
                p.mul_(len(p) ** 0.5 / p.norm())
                update = self.orthogonalize(g.reshape(len(g), -1), group["ns_steps"])
                p.add_(update.view(g.shape).to(p.dtype), alpha=-lr)
