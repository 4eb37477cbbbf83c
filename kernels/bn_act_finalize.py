"""Finalize batch-norm statistics: fold per-tile partial sums into mean,
1/std, the per-channel scale/shift that the next kernel applies, and (in
training) the running-statistics update, all in one small launch.

PyTorch conventions: the batch variance used for normalisation is biased
(divide by n); the running variance is updated with the unbiased one
(n / (n - 1)); ``momentum`` weights the new batch statistic.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def bn_finalize_kernel(
    psum_ptr, psumsq_ptr, P, C, count,
    weight_ptr, bias_ptr, rmean_ptr, rvar_ptr,
    mean_ptr, invstd_ptr, scale_ptr, shift_ptr,
    momentum, eps, unbias,
    TRAINING: tl.constexpr, UPDATE_RUNNING: tl.constexpr, BLOCK_C: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    if TRAINING:
        s = tl.zeros((BLOCK_C,), tl.float32)
        q = tl.zeros((BLOCK_C,), tl.float32)
        for p in range(0, P):  # fixed order: deterministic
            s += tl.load(psum_ptr + p * C + cols, mask=cmask, other=0.0)
            q += tl.load(psumsq_ptr + p * C + cols, mask=cmask, other=0.0)
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
