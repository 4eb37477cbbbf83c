"""Training-time augmentation: translate (reflect padding done once), the
alternating flip, optional cutout, normalisation.

Randomness is keyed by (seed, epoch, image index) through a counter-based hash
(SplitMix64's finaliser), so an image's augmentation never depends on the batch
size, the batch it lands in, or the number of processes. The hash runs on
the batch's device from the indices already there (torch elementwise ops, no
host read, nothing copied per step): the same function gives the parameters
to every backend, which only differ in how they gather, crop, flip and
normalise. tests/support/keyed_hash_numpy.py holds the host (NumPy uint64)
computation it replaced, which the tests match bit for bit.

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

# SplitMix64's constants. torch has no unsigned 64-bit arithmetic, so the hash
# runs on int64 tensors holding the same 64-bit patterns: multiplication and
# addition wrap alike, and right shifts are made logical by masking.
_MASK64 = (1 << 64) - 1
_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB

# Independent random streams per image.
STREAM_FLIP, STREAM_TRANSLATE, STREAM_CUTOUT, STREAM_JITTER = 0, 1, 2, 3


def _as_int64(v: int) -> int:
    """The 64-bit pattern ``v mod 2**64`` as the signed value an int64 tensor holds."""
    v &= _MASK64
    return v - (1 << 64) if v >> 63 else v


def shr(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift by ``k`` (1..63) of the 64-bit patterns in int64 ``x``
    (torch's ``>>`` is arithmetic: it would copy the sign bit in)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def umod(x: torch.Tensor, m: int) -> torch.Tensor:
    """``x mod m`` reading int64 ``x`` as unsigned 64-bit, for 0 < m < 2**31:
    its two 32-bit halves reduced apart, so no product leaves int64."""
    hi, lo = shr(x, 32), x & 0xFFFFFFFF
    return ((hi % m) * ((1 << 32) % m) + lo % m) % m


_SEED_KEY, _EPOCH_KEY = 1_000_003, 8_191  # the seed's and the epoch's weights in a stream's key


def stream_key(seed: int, epoch: int, stream: int) -> int:
    """The hash's key of one random stream of one epoch of a run."""
    return (seed * _SEED_KEY + epoch * _EPOCH_KEY + stream * 131) & _MASK64


def _key_term(seed: int | torch.Tensor, epoch: int | torch.Tensor, stream: int) -> int | torch.Tensor:
    """The stream's key as the finaliser's input adds it: ``key x MIX2 +
    GOLDEN`` (mod 2**64, as an int64 pattern). With ``seed`` or ``epoch`` an
    int64 tensor (a captured step's inputs on the device: one graph replays
    across epochs and seeds) the same pattern as a 0-dim tensor: int64
    products and sums wrap as the masked Python integers do."""
    if not isinstance(seed, torch.Tensor) and not isinstance(epoch, torch.Tensor):
        return _as_int64(stream_key(seed, epoch, stream) * _MIX2 + _GOLDEN)
    key = _as_int64(stream_key(0, 0, stream))
    for value, weight in ((seed, _SEED_KEY), (epoch, _EPOCH_KEY)):
        key = (value.long() * weight if isinstance(value, torch.Tensor)
               else _as_int64(value * weight)) + key
    return key * _as_int64(_MIX2) + _as_int64(_GOLDEN)


def keyed_bits(seed: int | torch.Tensor, epoch: int | torch.Tensor, indices: torch.Tensor,
               stream: int) -> torch.Tensor:
    """64 random bits per index (int64 patterns), a pure function of (seed,
    epoch, index, stream): SplitMix64's finaliser of ``index`` under the
    stream's key, elementwise on ``indices``' device, with no host read (a GPU
    computes it inside the step, capturable). ``seed`` and ``epoch`` may be
    0-dim int64 tensors on that device: the same bits."""
    x = indices.long() * _as_int64(_GOLDEN) + _key_term(seed, epoch, stream)
    x = (x ^ shr(x, 30)) * _as_int64(_MIX1)
    x = (x ^ shr(x, 27)) * _as_int64(_MIX2)
    return x ^ shr(x, 31)


def uniform_bits(bits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two independent uniforms in [-1, 1) (float64) from the high and the low
    24 bits of ``bits``."""
    return shr(bits, 40).double() / float(1 << 23) - 1.0, (bits & 0xFFFFFF).double() / float(1 << 23) - 1.0


@dataclass
class AugmentParams:
    """Per-image parameters of one batch: tensors of length B on the batch's
    device (the op contracts take tensors only)."""

    ox: torch.Tensor  # int32 column offset into the padded image, 0..2*translate
    oy: torch.Tensor  # int32 row offset
    flip: torch.Tensor  # bool: mirror left-right
    cut_x: torch.Tensor  # int32 left column of the cutout square (unused if cutout=0)
    cut_y: torch.Tensor  # int32 top row of the cutout square
    cutout: int  # side of the cutout square; 0 disables it


def augment_params(
    seed: int | torch.Tensor,
    epoch: int | torch.Tensor,
    indices: torch.Tensor | np.ndarray,
    translate: int = 2,
    flip: bool = True,
    cutout: int = 0,
    size: int = 32,
    alternate: bool = True,
) -> AugmentParams:
    """Parameters for images ``indices`` in ``epoch``, on ``indices``' device
    (a host array gives CPU tensors).

    Alternating flip: an image's flip is random in epoch 0 and inverted every
    other epoch after that, so over any two consecutive epochs each image is
    seen both ways. ``alternate=False``: a fresh coin toss every epoch (the
    usual random flip; epoch 0's toss is the alternating flip's). ``epoch``
    may be a 0-dim int64 tensor on ``indices``' device (:func:`keyed_bits`).
    """
    idx = torch.as_tensor(indices).long()
    span = 2 * translate + 1
    tb = keyed_bits(seed, epoch, idx, STREAM_TRANSLATE)
    ox, oy = umod(tb, span).int(), (shr(tb, 16) % span).int()
    if flip:  # alternating: epoch 0's toss, inverted in odd epochs; else each epoch's own toss
        toss = (keyed_bits(seed, 0 if alternate else epoch, idx, STREAM_FLIP) & 1).bool()
        if not alternate:
            fl = toss
        elif isinstance(epoch, torch.Tensor):
            fl = toss ^ (epoch % 2 == 1)  # inverted in odd epochs, decided on the device
        else:
            fl = ~toss if epoch % 2 else toss
    else:
        fl = torch.zeros(idx.shape, dtype=torch.bool, device=idx.device)
    if cutout > 0:
        cb, cut_span = keyed_bits(seed, epoch, idx, STREAM_CUTOUT), size - cutout + 1
        cx, cy = umod(cb, cut_span).int(), (shr(cb, 20) % cut_span).int()
    else:
        cx = cy = torch.zeros(idx.shape, dtype=torch.int32, device=idx.device)
    return AugmentParams(ox, oy, fl, cx, cy, cutout)


def color_jitter(x: torch.Tensor, seed: int | torch.Tensor, epoch: int | torch.Tensor,
                 indices: torch.Tensor | np.ndarray,
                 brightness: float, contrast: float) -> torch.Tensor:
    """hiverge's brightness/contrast jitter, in place on a normalised batch:
    image i becomes ``(x_i + b_i) * c_i`` with ``b_i ~ U(-brightness, brightness)``
    and ``c_i ~ 1 + U(-contrast, contrast)``, keyed by (seed, epoch, index)
    like every other augmentation parameter and computed on ``x``'s device
    (in float64, then rounded to float32 once)."""
    u_b, u_c = uniform_bits(keyed_bits(seed, epoch, to_device(indices, x.device), STREAM_JITTER))
    b = (brightness * u_b).float().view(-1, 1, 1, 1)
    c = (1.0 + contrast * u_c).float().view(-1, 1, 1, 1)
    return x.add_(b.to(x.dtype)).mul_(c.to(x.dtype))


def normalisation(mean: tuple[float, ...], std: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """float32 (scale, shift) per channel so that x = u8 * scale + shift
    equals (u8 / 255 - mean) / std."""
    std_ = np.asarray(std, dtype=np.float64)
    scale = (1.0 / (255.0 * std_)).astype(np.float32)
    shift = (-np.asarray(mean, dtype=np.float64) / std_).astype(np.float32)
    return scale, shift


def pad_reflect(images: torch.Tensor, pad: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Reflect-pad NHWC images of any dtype (numpy's ``mode="reflect"``: the
    edge pixel is not repeated), on their device, into ``out`` where given.
    Copies of slices: ``F.pad``'s reflect mode takes no uint8, and gathering
    columns with ``index_select`` took 1.6-2.7 s for the training set on 2
    cores against 0.2 s for numpy."""
    n, h, w, c = images.shape
    if pad == 0:
        return images.contiguous() if out is None else out.copy_(images)
    if pad >= min(h, w):
        raise ValueError(f"reflect padding of {pad} px needs images larger than {pad} px, not {h}x{w}")
    if out is None:
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
    ox, oy, fl = params.ox.to(dev).long(), params.oy.to(dev).long(), params.flip.to(dev)
    cols = torch.where(fl[:, None], size - 1 - ar, ar) + ox[:, None]
    rows = ar[None, :] + oy[:, None]
    idx = to_device(indices, dev).long()
    out = padded[idx[:, None, None], rows[:, :, None], cols[:, None, :]]  # B,H,W,C
    x = out.float() * scale.to(dev) + shift.to(dev)
    if params.cutout > 0:
        cx = params.cut_x.to(dev).long()[:, None]
        cy = params.cut_y.to(dev).long()[:, None]
        in_x = (ar[None, :] >= cx) & (ar[None, :] < cx + params.cutout)
        in_y = (ar[None, :] >= cy) & (ar[None, :] < cy + params.cutout)
        mask = in_y[:, :, None] & in_x[:, None, :]
        x = x.masked_fill(mask[..., None], 0.0)
    return x.permute(0, 3, 1, 2)  # NCHW view of NHWC memory = channels_last
