"""Learning-rate schedules, applied to every param group of several optimizers."""

from __future__ import annotations

import torch


def linear_decay(step: int, total_steps: int, floor: float = 0.0) -> float:
    """Multiplier that falls linearly from 1 at step 0 to 0 at ``total_steps``,
    held at ``floor`` once it would fall below (the 2026 record's tail: its
    last steps train at 0.05 of the start)."""
    return max(floor, 1.0 - step / total_steps)


def linear_decay_table(optimizers: list[torch.optim.Optimizer], steps: int, total_steps: int,
                       floor: float = 0.0) -> torch.Tensor:
    """Every group's learning rate (the optimisers' groups in order) at each
    step 0..``steps``, float64 [steps + 1, groups]: the group's ``lr`` x
    linear_decay(step, horizon, floor), the horizon ``total_steps`` (the
    decay's length, which may end before the run does) or the group's own
    ``decay_steps`` if it has one (a parameter trained only for the first
    steps: it falls to 0, no floor). The step reads its row on the device
    (a tensor indexed by the step's tensor), so nothing is written into the
    groups per step; in float64, so that the rates are the doubles the
    host computed (a float32 table would round them once more)."""
    groups = [g for opt in optimizers for g in opt.param_groups]
    return torch.tensor([[g["lr"] * (linear_decay(step, g["decay_steps"]) if g.get("decay_steps") else
                                      linear_decay(step, total_steps, floor)) for g in groups]
                         for step in range(steps + 1)], dtype=torch.float64)


def warmup_linear_decay(step: int, warmup_steps: int, total_steps: int, start: float = 1e-4) -> float:
    """FFCV's ImageNet schedule ("cyclic", a triangle): a multiplier that
    rises linearly from ``start`` at step 0 to 1 at ``warmup_steps``, then
    falls linearly to 0 at ``total_steps``. FFCV interpolates per step
    between its per-epoch values, which is this line when the peak falls on
    an epoch boundary."""
    if step < warmup_steps:
        return start + (1.0 - start) * step / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def set_warmup_linear_decay(optimizers: list[torch.optim.Optimizer], step: int, warmup_steps: int,
                            total_steps: int) -> None:
    """lr = initial_lr x warmup_linear_decay(step, ...) for every group."""
    scale = warmup_linear_decay(step, warmup_steps, total_steps)
    for opt in optimizers:
        for group in opt.param_groups:
            group.setdefault("initial_lr", group["lr"])
            group["lr"] = group["initial_lr"] * scale
