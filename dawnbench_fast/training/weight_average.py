"""The end-of-run weight average (the 2026 record's "lookahead" tail).

From ``start`` (an optimiser step count), every ``every`` steps the average
moves ``weight`` of the way to the net, and the net is set to the average:
``avg = (1 - weight) * avg + weight * net; net = avg``. At ``start`` the
average is a copy of the net. Averaged are the model's floating-point state:
its parameters and its BN running statistics, as the record averages its
state dict. The net the run ends with is the one evaluated.
"""

from __future__ import annotations

import torch


class TailAverage:
    """The average over ``model``'s floating-point state; call
    :meth:`after_step` with the step count after every optimiser step. Its
    memory is allocated with it (one buffer per averaged tensor); ``started``
    says whether the average holds anything yet."""

    def __init__(self, model: torch.nn.Module, start: int, every: int, weight: float):
        self.tensors = [t for t in model.state_dict().values() if t.is_floating_point()]
        self.start, self.every, self.weight = start, every, weight
        self.average = [torch.empty_like(t) for t in self.tensors]
        self.started = False

    @torch.no_grad()
    def after_step(self, step: int) -> None:
        if step == self.start:
            torch._foreach_copy_(self.average, self.tensors)
            self.started = True
        elif step > self.start and (step - self.start) % self.every == 0 and self.started:
            torch._foreach_lerp_(self.average, self.tensors, self.weight)
            for net, avg in zip(self.tensors, self.average, strict=True):
                net.copy_(avg)

    def state_dict(self) -> list[torch.Tensor] | None:
        return [a.clone() for a in self.average] if self.started else None

    @torch.no_grad()
    def load_state_dict(self, average: list[torch.Tensor] | None) -> None:
        """The average saved by :meth:`state_dict` (None: not started), copied into this one's buffers."""
        self.started = average is not None
        if average is not None:
            torch._foreach_copy_(self.average, list(average))
