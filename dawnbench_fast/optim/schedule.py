"""Learning-rate schedules, applied to every param group of several optimizers."""

from __future__ import annotations

import torch


def linear_decay(step: int, total_steps: int) -> float:
    """Multiplier that falls linearly from 1 at step 0 to 0 at ``total_steps``."""
    return max(0.0, 1.0 - step / total_steps)


def set_lr(optimizers: list[torch.optim.Optimizer], factor: float) -> None:
    """Set each group's lr to its ``initial_lr`` times ``factor``."""
    for opt in optimizers:
        for group in opt.param_groups:
            group.setdefault("initial_lr", group["lr"])
            group["lr"] = group["initial_lr"] * factor
