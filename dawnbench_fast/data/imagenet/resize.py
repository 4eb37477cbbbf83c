"""Crop + resize + horizontal flip of one decoded image, straight into its
slot of a uint8 NHWC batch: a numba kernel compiled with ``nogil=True``, so
the loader's threads run it in parallel.

The resampling is Pillow's bilinear ``resize`` (what torchvision's
``RandomResizedCrop`` and ``Resize`` use on PIL images), rewritten: a
triangle filter whose support widens with the downscale factor (so shrinking
is antialiased: every source pixel under an output pixel counts, none is
skipped), weights in 22-bit fixed point, one pass per axis with the
intermediate rounded to uint8. Doing what Pillow does, rounding included,
keeps the tests' reference exact and shows a model the pixels a torchvision
pipeline would have shown it. One liberty: the vertical pass runs first when
the box shrinks along y (the horizontal pass, which cannot vectorise, then
runs on the output's rows only: about 30% faster at 160 px), where Pillow
runs the horizontal pass first; the rounded intermediate then differs, and
the result by at most one grey level.

The box is in source pixels and may be fractional (a crop mapped into an
image decoded at 1/2, or the validation box); ``clip`` is the window the
filter may read (the crop itself for a training crop, as crop-then-resize
does; the whole image for the validation crop, as resize-then-crop does).
"""

from __future__ import annotations

import math

import numba
import numpy as np

PRECISION_BITS = 22  # Pillow's: 32 bits - 8 for the pixel - 2 spare
_HALF = 1 << (PRECISION_BITS - 1)


@numba.njit(nogil=True, cache=True)
def _coeffs(in0: float, in1: float, lo: int, hi: int, out_size: int):
    """Per output pixel: first source pixel, number of taps, fixed-point
    weights; Pillow's precompute_coeffs on the window [lo, hi) (coordinates
    relative to ``lo``, as on the cropped image). ``in0``/``in1`` are rounded
    to float32 first, as Pillow's box is."""
    a = np.float64(np.float32(in0 - lo))
    b = np.float64(np.float32(in1 - lo))
    scale = np.float64(np.float32(b) - np.float32(a)) / out_size
    filterscale = max(scale, 1.0)
    support = filterscale  # the triangle's support is 1, widened by the downscale
    ss = 1.0 / filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    size = hi - lo
    first = np.empty(out_size, np.int64)
    taps = np.empty(out_size, np.int64)
    weights = np.zeros((out_size, ksize), np.int32)
    tmp = np.zeros(ksize, np.float64)
    for xx in range(out_size):
        center = a + (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)  # int(): truncation, as C's cast
        xmax = min(int(center + support + 0.5), size) - xmin
        total = 0.0
        for x in range(xmax):
            w = 1.0 - abs((x + xmin - center + 0.5) * ss)
            w = max(w, 0.0)
            tmp[x] = w
            total += w
        for x in range(xmax):
            w = tmp[x] / total if total != 0.0 else tmp[x]
            weights[xx, x] = int(w * (1 << PRECISION_BITS) + (0.5 if w >= 0 else -0.5))
        first[xx] = xmin + lo
        taps[xx] = max(xmax, 0)
    return first, taps, weights


@numba.njit(nogil=True, cache=True, inline="always")
def _clip8(acc: int) -> int:
    v = acc >> PRECISION_BITS
    return 0 if v < 0 else (255 if v > 255 else v)


@numba.njit(nogil=True, cache=True)
def _horizontal(src, row0: int, first, taps, weights, flip: bool, out) -> None:
    """Rows ``row0 ..`` of ``src`` (h, w, 3) resampled along x into ``out``
    (rows, out_w, 3), mirrored if ``flip``: one output pixel at a time (the
    taps of neighbouring pixels overlap, which defeats vectorising)."""
    rows, out_w = out.shape[0], out.shape[1]
    for r in range(rows):
        line = src[row0 + r]
        for xx in range(out_w):
            a0 = a1 = a2 = _HALF
            x0 = first[xx]
            for t in range(taps[xx]):
                w = np.int64(weights[xx, t])
                a0 += line[x0 + t, 0] * w
                a1 += line[x0 + t, 1] * w
                a2 += line[x0 + t, 2] * w
            d = out_w - 1 - xx if flip else xx
            out[r, d, 0] = _clip8(a0)
            out[r, d, 1] = _clip8(a1)
            out[r, d, 2] = _clip8(a2)


@numba.njit(nogil=True, cache=True)
def _vertical(src, col0: int, first, taps, weights, out) -> None:
    """Columns ``col0 ..`` of ``src`` (h, w, 3) resampled along y into ``out``
    (out_h, cols, 3): whole rows at a time, contiguous, so it vectorises."""
    out_h, n = out.shape[0], out.shape[1] * 3
    flat_src = src.reshape(src.shape[0], src.shape[1] * 3)
    flat = out.reshape(out_h, n)
    acc = np.empty(n, np.int64)
    for yy in range(out_h):
        acc[:] = _HALF
        for t in range(taps[yy]):
            w = np.int64(weights[yy, t])
            line = flat_src[first[yy] + t, col0 * 3:col0 * 3 + n]
            for j in range(n):
                acc[j] += line[j] * w
        for j in range(n):
            flat[yy, j] = _clip8(acc[j])


@numba.njit(nogil=True, cache=True)
def resize_into(src, out, x0: float, y0: float, x1: float, y1: float,
                clip_left: int, clip_top: int, clip_right: int, clip_bottom: int, flip: bool) -> None:
    """Resample the box (x0, y0)-(x1, y1) of ``src`` (H, W, 3) uint8, reading
    only the clip window, into ``out`` (h, w, 3) uint8 C-contiguous, mirrored
    left-right if ``flip``. Every pixel of ``out`` is written."""
    out_h, out_w = out.shape[0], out.shape[1]
    fx, nx, kx = _coeffs(x0, x1, clip_left, clip_right, out_w)
    fy, ny, ky = _coeffs(y0, y1, clip_top, clip_bottom, out_h)
    # The source rows and columns the filters read.
    row0, rows = fy[0], fy[out_h - 1] + ny[out_h - 1] - fy[0]
    col0, cols = fx[0], fx[out_w - 1] + nx[out_w - 1] - fx[0]
    if rows > out_h:
        # Shrinking along y: the vertical pass first, so the slow horizontal
        # pass runs on out_h rows instead of all the box's rows.
        tmp = np.empty((out_h, cols, 3), np.uint8)
        _vertical(src, col0, fy, ny, ky, tmp)
        _horizontal(tmp, 0, fx - col0, nx, kx, flip, out)
    else:
        tmp = np.empty((rows, out_w, 3), np.uint8)
        _horizontal(src, row0, fx, nx, kx, flip, tmp)
        _vertical(tmp, 0, fy - row0, ny, ky, out)

