"""Finalize batch-norm statistics: fold per-tile partial sums into mean,
1/std, the per-channel scale/shift that the next kernel applies, and (in
training) the running-statistics update, all in one small launch; and the
backward's twin, partial sums of the gradient -> d weight, d bias and the
coefficients of dx (``bn_bwd_coef_kernel``).

PyTorch conventions: the batch variance used for normalisation is biased
(divide by n); the running variance is updated with the unbiased one
(n / (n - 1)); ``momentum`` weights the new batch statistic.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _sum_partials(p_ptr, q_ptr, P, C, cols, cmask, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    """Column sums of two [P, C] fp32 partial tables, BLOCK_P rows a step: the
    rows of a step are loaded at once (not one dependent load per row) and
    added in a fixed tree, so the result is the same bits on every run."""
    acc_p = tl.zeros((BLOCK_P, BLOCK_C), tl.float32)
    acc_q = tl.zeros((BLOCK_P, BLOCK_C), tl.float32)
    for p0 in range(0, P, BLOCK_P):
        rows = p0 + tl.arange(0, BLOCK_P)
        mask = (rows < P)[:, None] & cmask[None, :]
        offs = rows[:, None] * C + cols[None, :]
        acc_p += tl.load(p_ptr + offs, mask=mask, other=0.0)
        acc_q += tl.load(q_ptr + offs, mask=mask, other=0.0)
    return tl.sum(acc_p, axis=0), tl.sum(acc_q, axis=0)


@triton.jit
def bn_finalize_kernel(
    psum_ptr, psumsq_ptr, P, C, count,
    weight_ptr, bias_ptr, rmean_ptr, rvar_ptr,
    mean_ptr, invstd_ptr, scale_ptr, shift_ptr,
    momentum, eps, unbias,
    TRAINING: tl.constexpr, UPDATE_RUNNING: tl.constexpr, BLOCK_P: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    if TRAINING:
        s, q = _sum_partials(psum_ptr, psumsq_ptr, P, C, cols, cmask, BLOCK_P, BLOCK_C)
        mean = s / count
        var = tl.maximum(q / count - mean * mean, 0.0)
        if UPDATE_RUNNING:
            rm = tl.load(rmean_ptr + cols, mask=cmask, other=0.0)
            rv = tl.load(rvar_ptr + cols, mask=cmask, other=0.0)
            tl.store(rmean_ptr + cols, (1.0 - momentum) * rm + momentum * mean, mask=cmask)
            tl.store(rvar_ptr + cols, (1.0 - momentum) * rv + momentum * var * unbias, mask=cmask)
    else:
        mean = tl.load(rmean_ptr + cols, mask=cmask, other=0.0)
        var = tl.load(rvar_ptr + cols, mask=cmask, other=1.0)
    invstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(weight_ptr + cols, mask=cmask, other=1.0)
    b = tl.load(bias_ptr + cols, mask=cmask, other=0.0)
    scale = w * invstd
    tl.store(mean_ptr + cols, mean, mask=cmask)
    tl.store(invstd_ptr + cols, invstd, mask=cmask)
    tl.store(scale_ptr + cols, scale, mask=cmask)
    tl.store(shift_ptr + cols, b - mean * scale, mask=cmask)


@triton.jit
def bn_bwd_coef_kernel(
    pg_ptr, pgx_ptr, P, C, count, mean_ptr, invstd_ptr, scale_ptr,
    dweight_ptr, dbias_ptr, a_ptr, b_ptr,
    TRAINING: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """The backward's per-channel step in one launch: sum(g), sum(g*x) from the
    reduce kernel's partials -> d weight, d bias and the A, B of
    dx = g*scale + A + B*x (zero in eval: the statistics are constants)."""
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    g_sum, gx_sum = _sum_partials(pg_ptr, pgx_ptr, P, C, cols, cmask, BLOCK_P, BLOCK_C)
    mean = tl.load(mean_ptr + cols, mask=cmask, other=0.0)
    invstd = tl.load(invstd_ptr + cols, mask=cmask, other=0.0)
    scale = tl.load(scale_ptr + cols, mask=cmask, other=0.0)
    g_xhat = invstd * (gx_sum - mean * g_sum)
    if TRAINING:
        b = -scale * invstd * g_xhat / count
        a = -scale * g_sum / count - b * mean
    else:
        a = tl.zeros_like(g_sum)
        b = tl.zeros_like(g_sum)
    tl.store(dweight_ptr + cols, g_xhat, mask=cmask)
    tl.store(dbias_ptr + cols, g_sum, mask=cmask)
    tl.store(a_ptr + cols, a, mask=cmask)
    tl.store(b_ptr + cols, b, mask=cmask)


def bn_finalize_reference(
    s: torch.Tensor, q: torch.Tensor, count: int, weight: torch.Tensor, bias: torch.Tensor,
    running_mean: torch.Tensor, running_var: torch.Tensor, momentum: float, eps: float,
    training: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference of the kernel on summed statistics; updates running stats in place."""
    if training:
        mean = s / count
        var = (q / count - mean * mean).clamp_min(0)
        running_mean.mul_(1 - momentum).add_(momentum * mean)
        running_var.mul_(1 - momentum).add_(momentum * var * count / max(count - 1, 1))
    else:
        mean, var = running_mean.clone(), running_var.clone()
    invstd = torch.rsqrt(var + eps)
    scale = weight * invstd
    return mean, invstd, scale, bias - mean * scale


def bn_bwd_coef_reference(
    g_sum: torch.Tensor, gx_sum: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor,
    scale: torch.Tensor, count: float, training: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference of bn_bwd_coef_kernel on summed partials: (d weight, d bias,
    A, B) with dx = g*scale + A + B*x. In training the batch mean and variance
    depend on x, which A and B carry."""
    g_xhat = invstd * (gx_sum - mean * g_sum)
    if not training:
        z = torch.zeros_like(g_sum)
        return g_xhat, g_sum, z, z
    b = -scale * invstd * g_xhat / count
    a = -scale * g_sum / count - b * mean
    return g_xhat, g_sum, a, b
