"""Weight gradient of the 3x3 'same' convolution as an implicit GEMM over NHWC.

dW (9*Cin x Cout, tap-major) = A^T @ dY, where column p of A^T's row
(tap, ci) is input channel ci at pixel p shifted by the tap (zero outside the
image) and dY is the output gradient, both over N*H*W pixels. A block of M
rows spans taps (Cin is often smaller than a tile: 24 or 64 channels), so
each program reads its dY tile once for all the taps its rows cover, where a
program per tap read dY nine times (the H100's profile of 2026-11-26: this
kernel at 8x cuDNN's time at 24->64 @31 px). The reduction runs over all
pixels, so it is split over ``grid[2]`` programs (split-K) that add their fp32
partial products with atomics; with one split the store is plain (the
deterministic mode).

Prologue (``PROLOGUE``): the conv's input was act(y*scale + shift) of the
stored raw tensor y; it is recomputed here as the tile is loaded instead of
being stored in forward or rematerialised by another pass (zero padding after
the activation, as in forward).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dawnbench_fast.kernels.activations import apply_act


@triton.jit
def conv3x3_wgrad_kernel(
    x_ptr, dy_ptr, scale_ptr, shift_ptr, dw_ptr,
    NB, H, W, CIN, COUT, pix_per_split,
    PROLOGUE: tl.constexpr, ACT: tl.constexpr, ATOMIC: tl.constexpr,
    F32_MATH: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # Row r of dW is (tap, ci) = divmod(r, CIN): a block of rows may span taps,
    # each row reading its own shifted input channel. Tap (kh, kw) shifts the
    # flat pixel index p by dh*W + dw where the shifted pixel is in the image,
    # so the A tile's address is p*CIN + (dh*W + dw)*CIN + ci: an outer sum.
    r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    r_ok = r < 9 * CIN
    tap = r // CIN
    ci = r % CIN
    dh = tap // 3 - 1
    dw_ = tap % 3 - 1
    r_off = (dh * W + dw_) * CIN + ci
    co = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    co_ok = co < COUT
    if PROLOGUE:
        sc = tl.load(scale_ptr + ci, mask=r_ok, other=0.0)
        sh = tl.load(shift_ptr + ci, mask=r_ok, other=0.0)
    P = NB * H * W
    start = tl.program_id(2) * pix_per_split
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for p0 in range(0, pix_per_split, BLOCK_K):
        # int64 only in the block's base pointers; offsets within a block fit in int32
        # and halve the registers the [rows, pixels] addresses take.
        first = (start + p0).to(tl.int64)
        k = tl.arange(0, BLOCK_K)
        p = start + p0 + k
        p_ok = (p < P) & (p0 + k < pix_per_split)
        rem = p % (H * W)
        ih = (rem // W)[None, :] + dh[:, None]
        iw = (rem % W)[None, :] + dw_[:, None]
        a_mask = (r_ok[:, None] & p_ok[None, :] & (ih >= 0) & (ih < H) & (iw >= 0)
                  & (iw < W))
        a = tl.load(x_ptr + first * CIN + (k[None, :] * CIN + r_off[:, None]), mask=a_mask,
                    other=0.0)  # [rows, pixels]
        if PROLOGUE:
            a = apply_act(a.to(tl.float32) * sc[:, None] + sh[:, None], ACT)
            a = tl.where(a_mask, a, 0.0)
            if not F32_MATH:
                a = a.to(x_ptr.dtype.element_ty)
        elif F32_MATH:
            a = a.to(tl.float32)
        d = tl.load(dy_ptr + first * COUT + (k[:, None] * COUT + co[None, :]),
                    mask=p_ok[:, None] & co_ok[None, :], other=0.0)  # [pixels, co]
        if F32_MATH:
            d = d.to(tl.float32)
        acc = tl.dot(a, d, acc, input_precision=DOT_PRECISION)
    offs = r[:, None] * COUT + co[None, :]
    mask = r_ok[:, None] & co_ok[None, :]
    if ATOMIC:
        tl.atomic_add(dw_ptr + offs, acc, mask=mask)
    else:
        tl.store(dw_ptr + offs, acc, mask=mask)


def conv3x3_wgrad_reference(x_nchw: torch.Tensor, dy_nchw: torch.Tensor,
                            cout_cin: tuple[int, int]) -> torch.Tensor:
    """Reference: torch's weight gradient, fp32, [Cout, Cin, 3, 3]."""
    cout, cin = cout_cin
    return torch.nn.grad.conv2d_weight(x_nchw.float(), (cout, cin, 3, 3), dy_nchw.float(),
                                       padding=1)
