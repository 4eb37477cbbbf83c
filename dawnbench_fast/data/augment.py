"""Training-time augmentation: translate (reflect padding done once), the
alternating flip, optional cutout, normalisation.

Randomness is keyed by (seed, epoch, image index) through a counter-based hash
(SplitMix64's finaliser), so an image's augmentation never depends on the batch
size, the batch it lands in, or the number of processes. The same function
gives the parameters to every backend; backends only differ in how they
gather, crop, flip and normalise.

The ``augment`` op (this module's ``augment_torch`` is its reference, backend
``torch`` on any device, in dispatch.CATALOGUE) has
the signature ``augment(padded, indices, params, scale, shift) -> Tensor``:
``padded`` is the reflect-padded uint8 NHWC dataset, the result is a float32
(N, 3, 32, 32) batch in channels_last memory, ``x = u8 * scale[c] + shift[c]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dawnbench_fast.data.host_copy import to_device

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)

# Independent random streams per image.
STREAM_FLIP, STREAM_TRANSLATE, STREAM_CUTOUT, STREAM_JITTER = 0, 1, 2, 3


def keyed_bits(seed: int, epoch: int, indices: np.ndarray, stream: int) -> np.ndarray:
    """64 random bits per index, a pure function of (seed, epoch, index, stream)."""
    idx = np.asarray(indices, dtype=np.uint64)
    key = np.uint64((seed * 1_000_003 + epoch * 8_191 + stream * 131) & 0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        x = idx * _GOLDEN + key * _MIX2 + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * _MIX1
        x = (x ^ (x >> np.uint64(27))) * _MIX2
        x = x ^ (x >> np.uint64(31))
    return x & _M64


@dataclass
class AugmentParams:
    """Per-image parameters of one batch (all arrays of length B)."""

    ox: np.ndarray  # int32 column offset into the padded image, 0..2*translate
    oy: np.ndarray  # int32 row offset
    flip: np.ndarray  # bool: mirror left-right
    cut_x: np.ndarray  # int32 left column of the cutout square (unused if cutout=0)
    cut_y: np.ndarray  # int32 top row of the cutout square
    cutout: int  # side of the cutout square; 0 disables it


def augment_params(
    seed: int,
    epoch: int,
    indices: np.ndarray,
    translate: int = 2,
    flip: bool = True,
    cutout: int = 0,
    size: int = 32,
    alternate: bool = True,
) -> AugmentParams:
    """Parameters for images ``indices`` in ``epoch``.

    Alternating flip: an image's flip is random in epoch 0 and inverted every
    other epoch after that, so over any two consecutive epochs each image is
    seen both ways. ``alternate=False``: a fresh coin toss every epoch (the
    usual random flip; epoch 0's toss is the alternating flip's).
    """
    indices = np.asarray(indices, dtype=np.int64)
    t = translate
    tb = keyed_bits(seed, epoch, indices, STREAM_TRANSLATE)
    ox = (tb % np.uint64(2 * t + 1)).astype(np.int32)
    oy = ((tb >> np.uint64(16)) % np.uint64(2 * t + 1)).astype(np.int32)
    if flip:  # alternating: epoch 0's toss, inverted in odd epochs; else each epoch's own toss
        toss = (keyed_bits(seed, 0 if alternate else epoch, indices, STREAM_FLIP) & np.uint64(1)).astype(bool)
        fl = toss ^ (alternate and bool(epoch % 2))
    else:
        fl = np.zeros(len(indices), dtype=bool)
    if cutout > 0:
        cb = keyed_bits(seed, epoch, indices, STREAM_CUTOUT)
        span = np.uint64(size - cutout + 1)
        cx = (cb % span).astype(np.int32)
        cy = ((cb >> np.uint64(20)) % span).astype(np.int32)
    else:
        cx = cy = np.zeros(len(indices), dtype=np.int32)
    return AugmentParams(ox, oy, fl, cx, cy, cutout)


def color_jitter(x: torch.Tensor, seed: int, epoch: int, indices: np.ndarray, brightness: float,
                 contrast: float) -> torch.Tensor:
    """hiverge's brightness/contrast jitter, in place on a normalised batch:
    image i becomes ``(x_i + b_i) * c_i`` with ``b_i ~ U(-brightness, brightness)``
    and ``c_i ~ 1 + U(-contrast, contrast)``, keyed by (seed, epoch, index)
    like every other augmentation parameter."""
    bits = keyed_bits(seed, epoch, indices, STREAM_JITTER)
    # two independent uniforms in [-1, 1) from the high and low 24 bits
    u = np.stack([(bits >> np.uint64(40)), bits & np.uint64(0xFFFFFF)]).astype(np.float64)
    u = u / float(1 << 23) - 1.0
    b = to_device((brightness * u[0]).astype(np.float32), x.device).view(-1, 1, 1, 1)
    c = to_device((1.0 + contrast * u[1]).astype(np.float32), x.device).view(-1, 1, 1, 1)
    return x.add_(b.to(x.dtype)).mul_(c.to(x.dtype))


def normalisation(mean: tuple[float, ...], std: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """float32 (scale, shift) per channel so that x = u8 * scale + shift
    equals (u8 / 255 - mean) / std."""
    std_ = np.asarray(std, dtype=np.float64)
    scale = (1.0 / (255.0 * std_)).astype(np.float32)
    shift = (-np.asarray(mean, dtype=np.float64) / std_).astype(np.float32)
    return scale, shift


def pad_reflect(images: torch.Tensor, pad: int) -> torch.Tensor:
    """Reflect-pad NHWC images of any dtype (numpy's ``mode="reflect"``: the
    edge pixel is not repeated), on their device. Copies of slices: ``F.pad``'s
    reflect mode takes no uint8, and gathering columns with ``index_select``
    took 1.6-2.7 s for the training set on 2 cores against 0.2 s for numpy."""
    if pad == 0:
        return images.contiguous()
    n, h, w, c = images.shape
    if pad >= min(h, w):
        raise ValueError(f"reflect padding of {pad} px needs images larger than {pad} px, not {h}x{w}")
    out = images.new_empty((n, h + 2 * pad, w + 2 * pad, c))
    mid = out[:, pad:pad + h]
    mid[:, :, pad:pad + w] = images
    mid[:, :, :pad] = images[:, :, 1:pad + 1].flip(2)  # columns pad..1 mirror onto 0..pad-1
    mid[:, :, pad + w:] = images[:, :, w - pad - 1:w - 1].flip(2)
    out[:, :pad] = out[:, pad + 1:2 * pad + 1].flip(1)  # then whole rows, corners included
    out[:, pad + h:] = out[:, h - 1:h + pad - 1].flip(1)
    return out


def augment_torch(
    padded: torch.Tensor,
    indices: torch.Tensor,
    params: AugmentParams,
    scale: torch.Tensor,
    shift: torch.Tensor,
    size: int = 32,
) -> torch.Tensor:
    """Reference augmentation with torch ops on ``padded``'s device: one
    gather does translate + flip, then cutout and the affine normalisation."""
    dev = padded.device
    ar = torch.arange(size, device=dev)
    # the host-made parameters cross without a host synchronisation (data.host_copy)
    ox = to_device(params.ox, dev).long()
    oy = to_device(params.oy, dev).long()
    fl = to_device(params.flip, dev)
    cols = torch.where(fl[:, None], size - 1 - ar, ar) + ox[:, None]
    rows = ar[None, :] + oy[:, None]
    idx = to_device(indices, dev).long()
    out = padded[idx[:, None, None], rows[:, :, None], cols[:, None, :]]  # B,H,W,C
    x = out.float() * scale.to(dev) + shift.to(dev)
    if params.cutout > 0:
        cx = to_device(params.cut_x, dev).long()[:, None]
        cy = to_device(params.cut_y, dev).long()[:, None]
        in_x = (ar[None, :] >= cx) & (ar[None, :] < cx + params.cutout)
        in_y = (ar[None, :] >= cy) & (ar[None, :] < cy + params.cutout)
        mask = in_y[:, :, None] & in_x[:, None, :]
        x = x.masked_fill(mask[..., None], 0.0)
    return x.permute(0, 3, 1, 2)  # NCHW view of NHWC memory = channels_last
