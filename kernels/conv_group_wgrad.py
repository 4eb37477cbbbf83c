"""Weight gradient of the 3x3 'same' convolution as an implicit GEMM over NHWC.

For each tap (kh, kw): dW[tap] (Cin x Cout) = A_tap^T @ dY, where row p of
A_tap is the input pixel at p shifted by the tap (zero outside the image)
and dY is the output gradient, both N*H*W rows. The reduction runs over all
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
    cin_blocks = tl.cdiv(CIN, BLOCK_M)
    tap = tl.program_id(0) // cin_blocks
    ci = (tl.program_id(0) % cin_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
    co = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ci_ok = ci < CIN
    co_ok = co < COUT
    dh = tap // 3 - 1
    dw_ = tap % 3 - 1
    if PROLOGUE:
        sc = tl.load(scale_ptr + ci, mask=ci_ok, other=0.0)
        sh = tl.load(shift_ptr + ci, mask=ci_ok, other=0.0)
    P = NB * H * W
    start = tl.program_id(2) * pix_per_split
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for p0 in range(0, pix_per_split, BLOCK_K):
        k = p0 + tl.arange(0, BLOCK_K)
        p = start + k
        p_ok = (p < P) & (k < pix_per_split)
        n = p // (H * W)
        rem = p % (H * W)
        ih = rem // W + dh
        iw = rem % W + dw_
        in_ok = p_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        row = ((n.to(tl.int64) * H + ih) * W + iw) * CIN
        a_mask = ci_ok[:, None] & in_ok[None, :]
        a = tl.load(x_ptr + row[None, :] + ci[:, None], mask=a_mask, other=0.0)  # [ci, pixels]
        if PROLOGUE:
            a = apply_act(a.to(tl.float32) * sc[:, None] + sh[:, None], ACT)
            a = tl.where(a_mask, a, 0.0)
            if not F32_MATH:
                a = a.to(x_ptr.dtype.element_ty)
        elif F32_MATH:
            a = a.to(tl.float32)
        d = tl.load(dy_ptr + p.to(tl.int64)[:, None] * COUT + co[None, :],
                    mask=p_ok[:, None] & co_ok[None, :], other=0.0)  # [pixels, co]
        if F32_MATH:
            d = d.to(tl.float32)
        acc = tl.dot(a, d, acc, input_precision=DOT_PRECISION)
    offs = (tap * CIN + ci)[:, None] * COUT + co[None, :]
    mask = ci_ok[:, None] & co_ok[None, :]
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
