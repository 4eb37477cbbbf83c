"""Progressive resolution: early epochs train on smaller random crops.

A conv's cost grows with the pixels it sees, so an epoch on 24-px crops
costs about half of one on the full 32 px (docs/PERFORMANCE.md measures
it), while the net's global max-pool head takes any size. Crops, not
resizes, keep the objects' scale in pixels the same as at test time.
"""

from __future__ import annotations

import numpy as np
import torch

# keyed-RNG stream of the crop offsets (data.augment uses 0-2 for its own)
STREAM_CROP = 7


def epoch_side(progressive: tuple[int, ...], epoch: int, full: int) -> int:
    """The side epoch ``epoch`` trains at: ``progressive[epoch]``, else ``full``."""
    return min(progressive[epoch], full) if epoch < len(progressive) else full


def first_epoch_of_each_side(progressive: tuple[int, ...], epochs: int, full: int) -> tuple[int, ...]:
    """One epoch per distinct training side, for a warm-up that meets every shape."""
    sides = [epoch_side(progressive, e, full) for e in range(epochs)]
    return tuple(sides.index(s) for s in dict.fromkeys(sides))


def keyed_crop(x: torch.Tensor, side: int, seed: int, epoch: int, step: int) -> torch.Tensor:
    """One random ``side`` x ``side`` window of the batch ``x`` (the same for
    all its images, which are already translated one by one), keyed by
    seed, epoch and step so that a resumed run crops the same windows."""
    if side >= x.shape[-1]:
        return x
    span = x.shape[-1] - side + 1
    oy, ox = np.random.default_rng([seed, epoch, step, STREAM_CROP]).integers(0, span, 2)
    return x[..., oy:oy + side, ox:ox + side].contiguous(memory_format=torch.channels_last)
