"""One pass from the uint8 dataset to a normalised training batch.

Gather by index, translate (the dataset is reflect-padded once, so a
translation is an offset into the padded image), horizontal flip, optional
cutout, and x = u8 * scale[c] + shift[c], written NHWC (channels_last) in the
requested dtype (fp32 as the reference, or fp16/bf16 for the model).
Per-image parameters come from :func:`dawnbench_fast.data.augment.augment_params`
(keyed by seed, epoch and image index), so every backend sees the same ones.
Reference: ``dawnbench_fast.data.augment.augment_torch``.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def augment_kernel(
    padded_ptr, idx_ptr, ox_ptr, oy_ptr, flip_ptr, cutx_ptr, cuty_ptr, scale_ptr, shift_ptr,
    out_ptr, PH, PW, cutout,
    SIZE: tl.constexpr, C: tl.constexpr, BLOCK: tl.constexpr,
):
    b = tl.program_id(0)
    e = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)  # element of the output image
    ok = e < SIZE * SIZE * C
    c = e % C
    pix = e // C
    y = pix // SIZE
    x = pix % SIZE
    img = tl.load(idx_ptr + b).to(tl.int64)
    ox = tl.load(ox_ptr + b)
    oy = tl.load(oy_ptr + b)
    fl = tl.load(flip_ptr + b)
    sx = ox + tl.where(fl != 0, SIZE - 1 - x, x)
    sy = oy + y
    src = ((img * PH + sy) * PW + sx) * C + c
    v = tl.load(padded_ptr + src, mask=ok, other=0).to(tl.float32)
    sc = tl.load(scale_ptr + c, mask=ok, other=0.0)
    sh = tl.load(shift_ptr + c, mask=ok, other=0.0)
    v = v * sc + sh
    cx = tl.load(cutx_ptr + b)
    cy = tl.load(cuty_ptr + b)
    cut = (cutout > 0) & (x >= cx) & (x < cx + cutout) & (y >= cy) & (y < cy + cutout)
    v = tl.where(cut, 0.0, v)
    tl.store(out_ptr + b.to(tl.int64) * (SIZE * SIZE * C) + e,
             v.to(out_ptr.dtype.element_ty), mask=ok)
