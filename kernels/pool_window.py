"""Where a 2x2 max-pool window and a block of pixels sit in an NHWC image, as
Triton device functions shared by the kernels that address through the pool
(the fused conv's pooled epilogue, the pooled BN backward's scatter)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def window_origin(q, PH, PW):
    """Image and top-left input pixel (n, h, w) of pooling window ``q``, the
    windows numbered row-major over (n, ph, pw) of a PH x PW pooled map."""
    rem = q % (PH * PW)
    return q // (PH * PW), 2 * (rem // PW), 2 * (rem % PW)


@triton.jit
def block_pixels(n, h, w, n0, h0, w0, H, W):
    """Pixels (n, h, w) of an H x W image batch addressed from the block's
    first pixel (n0, h0, w0): that pixel's flat index in int64 and each
    pixel's int32 offset from it. An int64 index per element costs integer
    work and registers (local memory on sm_80 in the pooled BN backward);
    offsets within a block fit in int32."""
    first = (n0.to(tl.int64) * H + h0) * W + w0
    return first, ((n - n0) * H + (h - h0)) * W + (w - w0)
