"""Muon: momentum whose update is orthogonalised by a Newton-Schulz iteration.

Used on the 4-D conv filters of the CIFAR net. Each step (a) renormalises the
filter bank to Frobenius norm sqrt(out_channels), so that weight growth cannot
shrink the effective learning rate (every ``norm_every`` steps: hiverge's
record does it every 8th; with ``norm_ramp`` the period grows with the run's
progress, ``norm_every + int(norm_ramp * step / total_steps)`` steps after
the last renormalisation: the 2026 record's 2 + int(15 x progress)), then
(b) applies the orthogonalised Nesterov momentum, then (c) decays the
filters by ``1 - lr * weight_decay`` (off by default, as in airbench94_muon).

The step is a function of tensors (optim/updates.py): the learning rate and
the step's number come in as tensors on the filters' device, the
renormalisation steps are a table read at that number, and the banks of one
shape are orthogonalised in one batched call where ``batch_banks`` says so
(on the GPU: one chain of launches for the three 256x256 banks instead of
three; on the CPU each bank alone, because oneDNN's batched bf16 product
splits its sums otherwise and the CPU's trajectories stay bit for bit).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

# The iteration and its shared start live at the op floor (newton_schulz.py),
# where the Triton kernels read them too; re-exported for existing callers.
from dawnbench_fast.newton_schulz import NS_COEFFS, newton_schulz, newton_schulz_batched, ns_start
from dawnbench_fast.optim.updates import (
    at_step,
    group_rate,
    heavy_ball,
    momentum_buffers,
    nesterov,
    scaled_add_,
)

__all__ = ["NS_COEFFS", "Muon", "newton_schulz", "norm_period", "ns_start", "renorm_steps"]


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
        batch_banks: bool = False,
        orthogonalize_batch: Callable[[torch.Tensor, int], torch.Tensor] = newton_schulz_batched,
        fma: bool = True,
    ):
        """``orthogonalize(g2d, steps)`` is the backend's Newton-Schulz
        (``dispatch.get_op("newton_schulz", backend)``), used bank by bank;
        with ``batch_banks`` the banks of one shape go through
        ``orthogonalize_batch(g3d, steps)`` together instead (compiled where
        the step is). ``total_steps`` is the run's length, which
        ``norm_ramp``'s progress is a share of. ``fma``: the update's fused
        multiply-add (optim/updates.py; off where a graph replays it)."""
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
                                      weight_decay=weight_decay, norm_every=norm_every,
                                      norm_ramp=norm_ramp, total_steps=total_steps))
        self.orthogonalize, self.orthogonalize_batch = orthogonalize, orthogonalize_batch
        self.batch_banks, self.fma = batch_banks, fma
        self._renorm_tables: dict[tuple[int, torch.device], torch.Tensor] = {}

    def renorm_table(self, group: int, device: torch.device, upto: int = 0) -> torch.Tensor:
        """Whether each step (1-based) renormalises group ``group``'s banks, a
        bool tensor on ``device`` indexed by step: made once, through twice
        the run's length (a warm-up or a test may step past its end), longer
        if ``upto`` asks."""
        key, g = (group, device), self.param_groups[group]
        if key not in self._renorm_tables or len(self._renorm_tables[key]) <= upto:
            due = renorm_steps(max(2 * g["total_steps"] + 64, 2 * upto), g["total_steps"], g["norm_every"],
                               g["norm_ramp"])
            self._renorm_tables[key] = torch.tensor(due, dtype=torch.bool, device=device)
        return self._renorm_tables[key]

    @torch.no_grad()
    def step(self, lrs: torch.Tensor | None = None, step: torch.Tensor | None = None) -> None:  # noqa: D417
        """One step of every group. ``lrs``: each group's learning rate this
        step, a float64 tensor on the filters' device (default: the groups'
        own ``lr``); ``step``: this step's number (1-based) as a 0-dim
        integer tensor there, which says whether it renormalises (default:
        the optimiser's own count, kept on the host)."""
        for i, group in enumerate(self.param_groups):
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            device = params[0].device
            if step is None:  # a standalone optimiser counts its own steps
                group["count"] = group.get("count", 0) + 1
                renorm = self.renorm_table(i, device, group["count"])[group["count"]]
            else:
                renorm = at_step(self.renorm_table(i, device), step)
            muon_update(params, [p.grad for p in params], momentum_buffers(self.state, params),
                        group_rate(lrs, i, group, device), renorm, group, self._orthogonalize, self.fma)

    def _orthogonalize(self, grads: list[torch.Tensor], steps: int) -> list[torch.Tensor]:
        """Each bank's update, the banks of one shape batched with ``batch_banks``."""
        mats = [g.reshape(len(g), -1) for g in grads]
        if not self.batch_banks:
            return [self.orthogonalize(m, steps) for m in mats]
        out: list[torch.Tensor | None] = [None] * len(mats)
        for shape in dict.fromkeys(m.shape for m in mats):
            idx = [k for k, m in enumerate(mats) if m.shape == shape]
            batch = self.orthogonalize_batch(torch.stack([mats[k] for k in idx]), steps)
            for k, u in zip(idx, batch.unbind(), strict=True):
                out[k] = u
        return out


def muon_update(params: list[torch.Tensor], grads: list[torch.Tensor], bufs: list[torch.Tensor],
                lr: torch.Tensor, renorm: torch.Tensor, group: dict,
                orthogonalize: Callable[[list[torch.Tensor], int], list[torch.Tensor]],
                fma: bool = True) -> None:
    """One Muon step on tensors: momentum, the renormalisation where
    ``renorm`` (a 0-dim bool tensor) says so, the orthogonalised update at
    ``lr`` (0-dim float64), the decay. Bit for bit the per-parameter loop
    it replaced on the CPU (tests/optim/test_updates.py)."""
    g = nesterov(grads, bufs, group["momentum"]) if group["nesterov"] else heavy_ball(grads, bufs,
                                                                                       group["momentum"])
    # sqrt(rows) / norm, as reciprocal(norm) x sqrt(rows) (Tensor.__rtruediv__'s order: the same bits)
    scale = torch._foreach_reciprocal(torch._foreach_norm(params))
    torch._foreach_mul_(scale, [math.sqrt(len(p)) for p in params])
    scale = torch.where(renorm, torch.stack(scale), 1.0)
    torch._foreach_mul_(params, list(scale.unbind()))
    updates = [u.view(p.shape).to(p.dtype) for u, p in zip(orthogonalize(g, group["ns_steps"]), params,
                                                             strict=True)]
    scaled_add_(params, updates, -lr, fma)
    if group["weight_decay"]:
        # the factor computed in float64, then rounded as a Python float's was
        torch._foreach_mul_(params, (1.0 - lr * group["weight_decay"]).to(params[0].dtype))


def norm_period(step: int, norm_every: int, norm_ramp: int, total_steps: int) -> int:
    """Steps from one renormalisation to the next, as of optimiser step ``step``
    (1-based): ``norm_every``, plus ``int(norm_ramp x progress)``."""
    return norm_every + int(norm_ramp * (step / total_steps))


def renorm_steps(steps: int, total_steps: int, norm_every: int, norm_ramp: int) -> list[bool]:
    """Whether each of steps 1..``steps`` renormalises, indexed by step (index
    0 is before the first): ``norm_period`` steps after the last one (step 0
    at the start), the ramp's progress a share of ``total_steps``. Without
    a ramp the steps are the multiples of ``norm_every``."""
    due, last = [False], 0
    for step in range(1, steps + 1):
        now = step - last >= norm_period(step, norm_every, norm_ramp, total_steps)
        due.append(now)
        last = step if now else last
    return due
