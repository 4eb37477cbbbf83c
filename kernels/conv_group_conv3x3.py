"""Fused 3x3 'same' convolution (stride 1) as an implicit GEMM over NHWC.

GEMM view: M = output pixels, N = output channels, K = 9 taps x Cin, with the
weight laid out as a (9*Cin) x Cout matrix so that both operand tiles are
contiguous along K/N. Accumulation is fp32.

Fusions (docs/FACTS.md, "Kernel design"):
- prologue (``PROLOGUE``): the previous batch norm's scale/shift and the
  activation are applied as the input tile is loaded; the zero padding is
  applied after the activation, as in the unfused graph (pad(act(bn(x)))).
- epilogue (``POOL``): the M ordering enumerates each 2x2 pooling window as
  four consecutive rows, so a tile holds whole windows and the max-pool is a
  reduction over a reshaped accumulator; the window's argmax (0..3) is stored
  as int8 for the backward. Rows/columns that a floor-mode pool drops are
  never computed.
- epilogue (``STATS``): per-channel sum and sum of squares of the stored
  (rounded) output in fp32, either with atomics (``ATOMIC``) or as one row of
  partials per M tile (deterministic; summed in order by bn_finalize).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from dawnbench_fast.kernels.activations import apply_act
from dawnbench_fast.kernels.pool_window import block_pixels, window_origin
from dawnbench_fast.vocabulary import activation


@triton.jit
def conv3x3_fwd_kernel(
    x_ptr, w_ptr, scale_ptr, shift_ptr, y_ptr, idx_ptr, psum_ptr, psumsq_ptr,
    NB, H, W, CIN, COUT, OH, OW,
    PROLOGUE: tl.constexpr, ACT: tl.constexpr, POOL: tl.constexpr, STATS: tl.constexpr,
    ATOMIC: tl.constexpr, F32_MATH: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    if POOL:
        # OH, OW are the pooled sizes; row m is tap (m % 4) of window m // 4.
        M = NB * OH * OW * 4
        s = m % 4
        n, top, left = window_origin(m // 4, OH, OW)
        oh = top + s // 2
        ow = left + s % 2
        # each row's pixel relative to the block's first window (any base would
        # address the same pixels; this one keeps the offsets small)
        n0, oh0, ow0 = window_origin(pid_m * (BLOCK_M // 4), OH, OW)
        pix0, rel = block_pixels(n, oh, ow, n0, oh0, ow0, H, W)
    else:
        M = NB * OH * OW
        n = m // (OH * OW)
        rem = m % (OH * OW)
        oh = rem // OW
        ow = rem % OW
        pix0 = (pid_m * BLOCK_M).to(tl.int64)  # unpooled, row m is input pixel m
        rel = tl.arange(0, BLOCK_M)
    m_ok = m < M
    # int64 only in the block's base pointer, int32 offsets within the block
    # (pool_window.block_pixels; sm_90 SASS at 64->64: 1480 -> 1376
    # instructions, IMAD 225 -> 162, against an int64 address per element).
    x_base = x_ptr + pix0 * CIN
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = cols < COUT
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    # One flat K loop over (tap, channel block): a single loop body compiles
    # fast and lets the software pipeliner overlap loads across taps.
    kc = tl.cdiv(CIN, BLOCK_K)
    for it in range(0, 9 * kc):
        tap = it // kc
        c = (it % kc) * BLOCK_K + ks
        dh = tap // 3 - 1
        dw = tap % 3 - 1
        ih = oh + dh
        iw = ow + dw
        pix_ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        row = (rel + (dh * W + dw)) * CIN
        c_ok = c < CIN
        a_mask = pix_ok[:, None] & c_ok[None, :]
        a = tl.load(x_base + row[:, None] + c[None, :], mask=a_mask, other=0.0)
        if PROLOGUE:
            sc = tl.load(scale_ptr + c, mask=c_ok, other=0.0)
            sh = tl.load(shift_ptr + c, mask=c_ok, other=0.0)
            a = apply_act(a.to(tl.float32) * sc[None, :] + sh[None, :], ACT)
            a = tl.where(a_mask, a, 0.0)  # zero padding after the activation
            if not F32_MATH:
                a = a.to(x_ptr.dtype.element_ty)
        elif F32_MATH:
            a = a.to(tl.float32)
        b = tl.load(w_ptr + (tap * CIN + c)[:, None] * COUT + cols[None, :],
                    mask=c_ok[:, None] & n_ok[None, :], other=0.0)
        if F32_MATH:
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
    if POOL:
        acc3 = tl.reshape(acc, (BLOCK_M // 4, 4, BLOCK_N))
        out = tl.max(acc3, axis=1)
        arg = tl.argmax(acc3, axis=1)
        rows = pid_m * (BLOCK_M // 4) + tl.arange(0, BLOCK_M // 4)
        r_ok = rows < NB * OH * OW
    else:
        out = acc
        rows = m
        r_ok = m_ok
    mask = r_ok[:, None] & n_ok[None, :]
    offs = rows.to(tl.int64)[:, None] * COUT + cols[None, :]
    y = out.to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + offs, y, mask=mask)
    if POOL:
        tl.store(idx_ptr + offs, arg.to(tl.int8), mask=mask)
    if STATS:
        yf = tl.where(mask, y.to(tl.float32), 0.0)  # statistics of what is stored
        s1 = tl.sum(yf, axis=0)
        s2 = tl.sum(yf * yf, axis=0)
        if ATOMIC:
            tl.atomic_add(psum_ptr + cols, s1, mask=n_ok)
            tl.atomic_add(psumsq_ptr + cols, s2, mask=n_ok)
        else:
            tl.store(psum_ptr + pid_m * COUT + cols, s1, mask=n_ok)
            tl.store(psumsq_ptr + pid_m * COUT + cols, s2, mask=n_ok)


def conv3x3_reference(
    x_nchw: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None = None,
    shift: torch.Tensor | None = None, act: str = "gelu", pool: bool = False,
) -> torch.Tensor:
    """Reference of the fused forward in fp32: optional act(x*scale+shift), conv
    with zero padding, optional floor-mode 2x2 max-pool. Returns NCHW."""
    x = x_nchw.float()
    if scale is not None:
        x = activation(act).fn(x * scale[:, None, None] + shift[:, None, None])
    y = F.conv2d(x, weight.float(), padding=1)
    return F.max_pool2d(y, 2) if pool else y
