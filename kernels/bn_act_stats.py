"""Per-channel sum and sum of squares of an NHWC activation (viewed as R x C).

Statistics are accumulated in fp32 whatever the storage dtype. Each program
reduces a contiguous chunk of rows; ``ATOMIC`` adds its partial into a single
row with fp32 atomics (fast, order-dependent), otherwise every program writes
its own row of partials and :mod:`.bn_act_finalize` sums them in a fixed order
(bitwise deterministic).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def channel_stats_kernel(
    x_ptr, psum_ptr, psumsq_ptr, R, C, rows_per_prog,
    ATOMIC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    acc_s = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    acc_q = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    start = pid_r * rows_per_prog
    for r0 in range(start, start + rows_per_prog, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        mask = (rows < R)[:, None] & cmask[None, :]
        offs = rows.to(tl.int64)[:, None] * C + cols[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        acc_s += x
        acc_q += x * x
    s = tl.sum(acc_s, axis=0)
    q = tl.sum(acc_q, axis=0)
    if ATOMIC:
        tl.atomic_add(psum_ptr + cols, s, mask=cmask)
        tl.atomic_add(psumsq_ptr + cols, q, mask=cmask)
    else:
        tl.store(psum_ptr + pid_r * C + cols, s, mask=cmask)
        tl.store(psumsq_ptr + pid_r * C + cols, q, mask=cmask)


def channel_stats_reference(x2d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: fp32 column sums and sums of squares of an R x C matrix."""
    x = x2d.float()
    return x.sum(0), (x * x).sum(0)
