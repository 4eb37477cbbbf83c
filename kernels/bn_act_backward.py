"""Backward of batch norm + activation for NHWC activations (R x C).

With u = x*scale + shift, y = act(u) and g = dy * act'(u), the gradient is
dx = g*scale + A[c] + B[c]*x, where A and B carry the dependence of the batch
statistics on x (both zero in eval mode). Two kernels:

1. ``bn_act_bwd_reduce_kernel``: per-channel partials of sum(g) and sum(g*x)
   (fp32, one row per program; the host sums the few rows);
2. ``bn_act_bwd_apply_kernel``: dx, optionally scattered back through the
   2x2 max-pool that preceded the batch norm (``POOL``; the argmax code of each
   window comes from the conv epilogue), so the conv's data/weight gradients
   receive the full-resolution gradient without another pass.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dawnbench_fast.kernels.activations import act_grad
from dawnbench_fast.kernels.pool_window import block_pixels, window_origin
from dawnbench_fast.vocabulary import activation


@triton.jit
def bn_act_bwd_reduce_kernel(
    dy_ptr, x_ptr, scale_ptr, shift_ptr, pg_ptr, pgx_ptr, R, C, rows_per_prog,
    ACT: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    pid_r = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    scale = tl.load(scale_ptr + cols, mask=cmask, other=0.0)
    shift = tl.load(shift_ptr + cols, mask=cmask, other=0.0)
    acc_g = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    acc_gx = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    start = pid_r * rows_per_prog
    for r0 in range(start, start + rows_per_prog, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        mask = (rows < R)[:, None] & cmask[None, :]
        offs = rows.to(tl.int64)[:, None] * C + cols[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        g = dy * act_grad(x * scale[None, :] + shift[None, :], ACT)
        g = tl.where(mask, g, 0.0)
        acc_g += g
        acc_gx += g * x
    tl.store(pg_ptr + pid_r * C + cols, tl.sum(acc_g, axis=0), mask=cmask)
    tl.store(pgx_ptr + pid_r * C + cols, tl.sum(acc_gx, axis=0), mask=cmask)


@triton.jit
def bn_act_bwd_apply_kernel(
    dy_ptr, x_ptr, scale_ptr, shift_ptr, a_ptr, b_ptr, idx_ptr, dx_ptr,
    R, C, PH, PW, H, W,
    ACT: tl.constexpr, POOL: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    mask = (rows < R)[:, None] & cmask[None, :]
    offs = rows.to(tl.int64)[:, None] * C + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    scale = tl.load(scale_ptr + cols, mask=cmask, other=0.0)
    shift = tl.load(shift_ptr + cols, mask=cmask, other=0.0)
    a = tl.load(a_ptr + cols, mask=cmask, other=0.0)
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0)
    g = dy * act_grad(x * scale[None, :] + shift[None, :], ACT)
    dx = (g * scale[None, :] + a[None, :] + b[None, :] * x).to(dx_ptr.dtype.element_ty)
    if POOL:
        # rows index pooled pixels (n, ph, pw); scatter into the 2x2 window,
        # addressed from the block's first window (one int64 base, int32 offsets)
        idx = tl.load(idx_ptr + offs, mask=mask, other=0).to(tl.int32)
        n, top, left = window_origin(rows, PH, PW)
        n0, top0, left0 = window_origin(tl.program_id(0) * BLOCK_R, PH, PW)
        first, rel = block_pixels(n, top, left, n0, top0, left0, H, W)
        block = dx_ptr + first * C
        for s in tl.static_range(4):
            full = rel + (s // 2) * W + (s % 2)
            tl.store(block + full[:, None] * C + cols[None, :],
                     tl.where(idx == s, dx, tl.zeros_like(dx)), mask=mask)
    else:
        tl.store(dx_ptr + offs, dx, mask=mask)


def bn_act_backward_reference(
    dy: torch.Tensor, x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor,
    a: torch.Tensor, b: torch.Tensor, act: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference (R x C, no pool): returns dx, sum(g), sum(g*x)."""
    xf = x.float()
    u = (xf * scale + shift).detach().requires_grad_(True)
    with torch.enable_grad():
        (g,) = torch.autograd.grad(activation(act).fn(u), u, dy.float())
    dx = g * scale + a + b * xf
    return dx.to(x.dtype), g.sum(0), (g * xf).sum(0)
