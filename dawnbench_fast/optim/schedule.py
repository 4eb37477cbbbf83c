"""Learning-rate schedules, applied to every param group of several optimizers."""

from __future__ import annotations

import torch


def linear_decay(step: int, total_steps: int) -> float:
    """Multiplier that falls linearly from 1 at step 0 to 0 at ``total_steps``."""
    return max(0.0, 1.0 - step / total_steps)


def set_linear_decay(optimizers: list[torch.optim.Optimizer], step: int, total_steps: int) -> None:
    """lr = initial_lr x linear_decay(step, horizon) for every group, where the
    horizon is the group's own ``decay_steps`` if it has one (e.g. a parameter
    trained only for the first epochs), else ``total_steps``."""
    for opt in optimizers:
        for group in opt.param_groups:
            group.setdefault("initial_lr", group["lr"])
            horizon = group.get("decay_steps") or total_steps
            group["lr"] = group["initial_lr"] * linear_decay(step, horizon)
