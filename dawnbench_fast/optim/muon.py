"""Muon: momentum whose update is orthogonalised by a Newton-Schulz iteration.

Used on the 4-D conv filters of the CIFAR net. Each step (a) renormalises the
filter bank to Frobenius norm sqrt(out_channels), so that weight growth cannot
shrink the effective learning rate (every ``norm_every`` steps: hiverge's
record does it every 8th; with ``norm_ramp`` the period grows with the run's
progress, ``norm_every + int(norm_ramp * step / total_steps)`` steps after
the last renormalisation: the 2026 record's 2 + int(15 x progress)), then
(b) applies the orthogonalised Nesterov momentum, then (c) decays the
filters by ``1 - lr * weight_decay`` (off by default, as in airbench94_muon).
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
        weight_decay: float = 0.0,
        norm_every: int = 1,
        norm_ramp: int = 0,
        total_steps: int = 1,
    ):
        """``orthogonalize(g2d, steps)`` is the backend's Newton-Schulz
        (``dispatch.get_op("newton_schulz", backend)``); ``total_steps`` is
        the run's length, which ``norm_ramp``'s progress is a share of."""
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
                                      weight_decay=weight_decay, norm_every=norm_every,
                                      norm_ramp=norm_ramp, total_steps=total_steps))
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
                state["step"] = state.get("step", 0) + 1  # saved: a resumed run renormalises on time
                if renorm_due(state, group):
                    p.mul_(len(p) ** 0.5 / p.norm())
                update = self.orthogonalize(g.reshape(len(g), -1), group["ns_steps"])
                p.add_(update.view(g.shape).to(p.dtype), alpha=-lr)
                if group.get("weight_decay", 0.0):
                    p.mul_(1.0 - lr * group["weight_decay"])


def norm_period(step: int, norm_every: int, norm_ramp: int, total_steps: int) -> int:
    """Steps from one renormalisation to the next, as of optimiser step ``step``
    (1-based): ``norm_every``, plus ``int(norm_ramp x progress)``."""
    return norm_every + int(norm_ramp * (step / total_steps))


def renorm_due(state: dict, group: dict) -> bool:
    """Whether this step (``state["step"]``, 1-based) renormalises the bank,
    ``norm_period`` steps after the last one (step 0 at the start); records
    it in ``state["last_norm"]`` when due. Without a ramp the steps are the
    multiples of ``norm_every``."""
    step = state["step"]
    every = group.get("norm_every", 1)
    # a state saved before last_norm existed: the last multiple of norm_every
    last = state.setdefault("last_norm", (step - 1) // every * every)
    if step - last < norm_period(step, every, group.get("norm_ramp", 0), group.get("total_steps", 1)):
        return False
    state["last_norm"] = step
    return True
