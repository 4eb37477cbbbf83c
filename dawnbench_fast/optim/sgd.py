"""Nesterov SGD whose learning rates are tensors: torch.optim.SGD's
arithmetic (dampening 0, coupled weight decay) on foreach ops
(optim/updates.py), each group's rate passed in at every step as a tensor
on the parameters' device rather than written into the groups as Python
floats. On the CPU it is bit for bit torch.optim.SGD with the same rates
(tests/optim/test_updates.py)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from dawnbench_fast.optim.updates import group_rate, momentum_buffers, sgd_update


class NesterovSGD(torch.optim.Optimizer):
    def __init__(self, params: Iterable[torch.nn.Parameter] | Iterable[dict], lr: float = 0.01,
                 momentum: float = 0.9, weight_decay: float = 0.0, fma: bool = True):
        """``fma``: the updates' fused multiply-add (optim/updates.py; off where a graph replays them)."""
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))
        self.fma = fma

    @torch.no_grad()
    def step(self, lrs: torch.Tensor | None = None) -> None:  # noqa: D417
        """One step of every group; ``lrs``: each group's learning rate this
        step, a float64 tensor on the parameters' device (default: the
        groups' own ``lr``)."""
        for i, group in enumerate(self.param_groups):
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            sgd_update(params, [p.grad for p in params], momentum_buffers(self.state, params),
                       -group_rate(lrs, i, group, params[0].device), group["momentum"], group["weight_decay"],
                       self.fma)
