"""Muon: momentum whose update is orthogonalised by a Newton-Schulz iteration.

Used on the 4-D conv filters of the CIFAR net. Each step (a) renormalises the
filter bank to Frobenius norm sqrt(out_channels), so that weight growth cannot
shrink the effective learning rate, then (b) applies the orthogonalised
Nesterov momentum.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

# The iteration and its shared start live at the op floor (newton_schulz.py),
# where the Triton kernels read them too; re-exported for existing callers.
from dawnbench_fast.newton_schulz import NS_COEFFS, newton_schulz, ns_start

__all__ = ["NS_COEFFS", "Muon", "newton_schulz", "ns_start"]


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
