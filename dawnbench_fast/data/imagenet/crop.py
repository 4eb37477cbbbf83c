"""Where each image is cut: the training random-resized crop and flip, and the
validation centre crop, as boxes in the original image's pixels.

Randomness is keyed by (seed, epoch, global image index) through SplitMix64
(a counter-based generator: the n-th number of an image's stream is a hash of
its key and n), so an image's crop is the same whatever batch it lands in,
whatever the batch size and however many processes share the epoch. The
numbers are drawn for a whole batch at once with numpy; the loop of
torchvision's rule then runs per image, once its size is known from the header.

The random-resized crop is torchvision's ``RandomResizedCrop.get_params``:
area fraction uniform in ``scale`` (0.08, 1), log aspect ratio uniform in
log ``ratio`` (3/4, 4/3), up to ten tries for a box that fits, else a centre
crop of the whole image clamped to the ratio range. The validation crop is
the usual one: the shorter side resized to ``round(size / 0.875)`` (256 for
224), the centre ``size`` x ``size`` cut from that.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
TRIES = 10
CROP_FRACTION = 0.875  # validation: a 224 crop of the image resized to 256
# Per image: (area, log ratio, top, left) for each try, then the flip.
UNIFORMS = 4 * TRIES + 1

_M64 = 0xFFFFFFFFFFFFFFFF
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


class Box(NamedTuple):
    """A region of the source image in its pixels, and the clip window its
    resampling filter may read from (for a training crop, the crop itself,
    as torchvision's crop-then-resize; for the validation crop, the whole
    image, as resize-then-crop)."""

    x0: float
    y0: float
    x1: float
    y1: float
    clip: tuple[int, int, int, int]  # (left, top, right, bottom), right/bottom exclusive


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, vectorised (uint64 arithmetic wraps)."""
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def keyed_uniforms(seed: int, epoch: int, indices: np.ndarray, count: int = UNIFORMS) -> np.ndarray:
    """float64 (len(indices), count) uniforms in [0, 1): row i is the first
    ``count`` numbers of the SplitMix64 stream keyed by (seed, epoch, indices[i])."""
    idx = np.asarray(indices, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed & _M64) + _GOLDEN)
        key = _mix(key ^ (np.uint64(epoch & _M64) + _GOLDEN))
        state = _mix(key ^ _mix(idx + _GOLDEN))  # one key per image
        steps = np.arange(1, count + 1, dtype=np.uint64) * _GOLDEN
        bits = _mix(state[:, None] + steps[None, :])
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def keyed_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    """The epoch's order of ``n`` images: int64, a pure function of (seed, epoch, n)."""
    key = keyed_uniforms(seed, -1 - epoch, np.arange(n), 1)[:, 0]  # epochs < 0: a stream of their own
    return np.argsort(key, kind="stable").astype(np.int64)


def random_resized_crop(width: int, height: int, u: np.ndarray, scale: tuple[float, float] = SCALE,
                        ratio: tuple[float, float] = RATIO) -> tuple[int, int, int, int]:
    """(left, top, w, h) by torchvision's rule, with the uniforms ``u`` (one
    row of :func:`keyed_uniforms`) in place of its torch generator."""
    area = width * height
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    for t in range(TRIES):
        ua, ur, ui, uj = u[4 * t:4 * t + 4]
        target = area * (scale[0] + (scale[1] - scale[0]) * ua)
        aspect = math.exp(lo + (hi - lo) * ur)
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            # torch.randint(0, n): floor(u * n), n = the positions that fit
            return int(uj * (width - w + 1)), int(ui * (height - h + 1)), w, h
    in_ratio = width / height  # no try fitted: centre crop at the nearest allowed ratio
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        w, h = int(round(height * max(ratio))), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def train_box(width: int, height: int, u: np.ndarray) -> tuple[Box, bool]:
    """The training crop of a ``width`` x ``height`` image and its flip."""
    x, y, w, h = random_resized_crop(width, height, u)
    return Box(x, y, x + w, y + h, (x, y, x + w, y + h)), bool(u[4 * TRIES] < 0.5)


def resized_size(width: int, height: int, short: int) -> tuple[int, int]:
    """torchvision's ``Resize(short)``: the shorter side becomes ``short``,
    the longer one ``int(short * long / shorter)``."""
    if width <= height:
        return short, int(short * height / width)
    return int(short * width / height), short


def val_box(width: int, height: int, size: int, fraction: float = CROP_FRACTION) -> Box:
    """The centre ``size`` crop of the image resized to shorter side
    ``round(size / fraction)``, as a box in the original's pixels (one resize
    of that box gives what resize-then-crop gives: same centres, same filter)."""
    new_w, new_h = resized_size(width, height, int(round(size / fraction)))
    left = int(round((new_w - size) / 2.0))  # torchvision's CenterCrop
    top = int(round((new_h - size) / 2.0))
    sx, sy = width / new_w, height / new_h
    return Box(left * sx, top * sy, (left + size) * sx, (top + size) * sy, (0, 0, width, height))


def scaled(box: Box, s: int, width: int, height: int) -> Box:
    """``box`` in an image decoded at 1/``s`` (``width`` x ``height`` after the
    reduction): coordinates divided by ``s``, the clip window widened to whole pixels."""
    if s == 1:
        return box
    left, top, right, bottom = box.clip
    clip = (left // s, top // s, min(width, -(-right // s)), min(height, -(-bottom // s)))
    return Box(box.x0 / s, box.y0 / s, box.x1 / s, box.y1 / s, clip)
