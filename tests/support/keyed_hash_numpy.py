"""The keyed augmentation randomness as the host computed it before it moved
to the device (data/augment.py up to 7dfbcf1): NumPy uint64 arithmetic,
SplitMix64's finaliser. The reference the device hash must match bit for bit,
kept here so that the library has one implementation and the tests an
independent one."""

from __future__ import annotations

import numpy as np

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
STREAM_FLIP, STREAM_TRANSLATE, STREAM_CUTOUT, STREAM_JITTER = 0, 1, 2, 3


def keyed_bits(seed: int, epoch: int, indices, stream: int) -> np.ndarray:
    idx = np.asarray(indices, dtype=np.uint64)
    key = np.uint64((seed * 1_000_003 + epoch * 8_191 + stream * 131) & 0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        x = idx * _GOLDEN + key * _MIX2 + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * _MIX1
        x = (x ^ (x >> np.uint64(27))) * _MIX2
        x = x ^ (x >> np.uint64(31))
    return x & _M64


def augment_params(seed: int, epoch: int, indices, translate: int = 2, flip: bool = True, cutout: int = 0,
                   size: int = 32, alternate: bool = True) -> dict[str, np.ndarray]:
    indices = np.asarray(indices, dtype=np.int64)
    t = translate
    tb = keyed_bits(seed, epoch, indices, STREAM_TRANSLATE)
    ox = (tb % np.uint64(2 * t + 1)).astype(np.int32)
    oy = ((tb >> np.uint64(16)) % np.uint64(2 * t + 1)).astype(np.int32)
    if flip:
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
    return dict(ox=ox, oy=oy, flip=fl, cut_x=cx, cut_y=cy)


def jitter_factors(seed: int, epoch: int, indices, brightness: float,
                   contrast: float) -> tuple[np.ndarray, np.ndarray]:
    """(b, c) float32 per image: x becomes (x + b) * c."""
    bits = keyed_bits(seed, epoch, indices, STREAM_JITTER)
    u = np.stack([(bits >> np.uint64(40)), bits & np.uint64(0xFFFFFF)]).astype(np.float64)
    u = u / float(1 << 23) - 1.0
    return (brightness * u[0]).astype(np.float32), (1.0 + contrast * u[1]).astype(np.float32)
