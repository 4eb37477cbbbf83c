"""Progressive resolution: early epochs train on smaller images.

A conv's cost grows with the pixels it sees, so an epoch at 24 px costs
about half of one at 32 px (docs/PERFORMANCE.md measures it), while the
net's global max-pool head takes any size. Two ways to make the smaller
image (the recipe's ``progressive_mode``):

- ``crop``: a random ``side``-px window of the augmented batch, keyed by
  seed, epoch and step. The objects keep their scale in pixels.
- ``downsample``: the whole augmented 32-px image resized bilinearly
  (``align_corners=False``, no antialiasing), after the colour jitter: the
  2026 record's way (fulcrumresearch/cifar-10-speedrun), which in its
  comparison lost less accuracy than cropping (0.12 against 0.19 points).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dawnbench_fast.data.augment import keyed_bits, shr, umod

# the crop offsets' stream of the keyed hash (data.augment's streams are 0-3)
STREAM_CROP = 7
MODES: tuple[str, ...] = ("crop", "downsample")


def epoch_side(progressive: tuple[int, ...], epoch: int, full: int) -> int:
    """The side epoch ``epoch`` trains at: ``progressive[epoch]``, else ``full``."""
    return min(progressive[epoch], full) if epoch < len(progressive) else full


def first_epoch_of_each_side(progressive: tuple[int, ...], epochs: int, full: int) -> tuple[int, ...]:
    """One epoch per distinct training side, for a warm-up that meets every shape."""
    sides = [epoch_side(progressive, e, full) for e in range(epochs)]
    return tuple(sides.index(s) for s in dict.fromkeys(sides))


def keyed_crop(x: torch.Tensor, side: int, seed: int | torch.Tensor, epoch: int | torch.Tensor,
               step: int | torch.Tensor) -> torch.Tensor:
    """One random ``side`` x ``side`` window of the batch ``x`` (the same for
    all its images, which are already translated one by one), keyed by seed,
    epoch and step through the augmentation's hash (data.augment.keyed_bits,
    its own stream), so that a resumed run crops the same windows. The offsets
    stay on ``x``'s device and the window is gathered there: no host read, and
    ``epoch`` and ``step`` may be tensors there (a captured step's inputs)."""
    if side >= x.shape[-1]:
        return x
    span = x.shape[-1] - side + 1
    steps = (step.reshape(1) if torch.is_tensor(step) else  # a Python int: a fill, no host-to-device copy
             torch.full((1,), step, dtype=torch.int64, device=x.device))
    bits = keyed_bits(seed, epoch, steps, STREAM_CROP)
    ar = torch.arange(side, device=x.device)
    rows, cols = umod(bits, span) + ar, shr(bits, 32) % span + ar
    return x.index_select(2, rows).index_select(3, cols).contiguous(memory_format=torch.channels_last)


def downsample(x: torch.Tensor, side: int) -> torch.Tensor:
    """The batch ``x`` resized to ``side`` x ``side`` by bilinear
    interpolation with half-pixel centres (``align_corners=False``) and no
    antialiasing: output pixel i reads the input at (i + 0.5) * H / side - 0.5,
    clamped at 0. ``x`` itself where it is no larger."""
    if side >= x.shape[-1]:
        return x
    out = F.interpolate(x, size=(side, side), mode="bilinear", align_corners=False, antialias=False)
    return out.contiguous(memory_format=torch.channels_last)


def at_side(x: torch.Tensor, side: int, mode: str, seed: int | torch.Tensor, epoch: int | torch.Tensor,
            step: int | torch.Tensor) -> torch.Tensor:
    """The augmented batch ``x`` at the epoch's training side, made as
    ``mode`` says (one of :data:`MODES`)."""
    if mode == "downsample":
        return downsample(x, side)
    return keyed_crop(x, side, seed, epoch, step)
