"""The ``bn_act`` op fused with the 2x2 max-pool before it, on the CPU
(OpenMP/AVX-512) build of csrc: ``dawnbench::csrc_pool_bn_act_fwd`` /
``_bwd`` (csrc/bn_act_pool_cpu.cpp), the first half of a conv group after
its first convolution; the cpu conv group (csrc/conv_group.py) runs it where
its ``bn_act`` is this backend's (csrc/bn_act.py).

Reference: ``layer_ops.bn_act(F.max_pool2d(x, 2), bn, act)``. Why fused: the
separate ops made 5 passes over memory forward (pool, its int64 indices,
statistics, normalise) and 4 backward, and ATen's bf16 max-pool and its
backward ran at 1-2 GB/s here (docs/journal/, the fused passes' period). Fused: forward reads x
once to write the pooled tensor, a one-byte argmax code per pooled element and
the batch statistics, then one pass normalises and activates; backward is one
reduction pass over (pooled, dy) and one pass writing the full-size dx. Only
the pooled tensor, the codes and 4*C statistics are kept for backward.

The results are bit-identical to ATen's max-pool followed by the csrc
``bn_act`` (same tie rule, same summation order, same element math). fp32 and
bf16 storage; channels_last (NHWC) memory (other layouts are made so first).
Tests: tests/ops/test_bn_act_pool.py. Costs: csrc/bn_act_costs.py.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from dawnbench_fast.csrc import native
from dawnbench_fast.csrc.bn_act import bn_act, bn_module_args, bn_parameters, check_same, update_running_stats
from dawnbench_fast.csrc.bn_act_costs import COSTS
from dawnbench_fast.csrc.engine import DTYPE_CODES, new_output, ptr
from dawnbench_fast.roofline.registry import register_flop_formulas
from dawnbench_fast.vocabulary import activation

FUSED_DTYPES = (torch.float32, torch.bfloat16)


def _nhwc(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_contiguous(memory_format=torch.channels_last) else \
        x.contiguous(memory_format=torch.channels_last)


def _codes(n: int, h: int, w: int, c: int) -> torch.Tensor:
    """uint8 (N, C, h, w) in NHWC memory, allocated through NumPy (huge pages)."""
    return torch.from_numpy(np.empty((n, h, w, c), dtype=np.uint8)).permute(0, 3, 1, 2)


@torch.library.custom_op("dawnbench::csrc_pool_bn_act_fwd", mutates_args=())
def pool_bn_act_fwd(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
    running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
    training: bool, eps: float, momentum: float, act: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, pooled, codes, stats, new_running_mean, new_running_var):
    y = act(batchnorm(max_pool2d(x, 2))); pooled and codes (argmax 0..3 of
    each window, row-major) and stats [mean | invstd | scale | bias] are kept
    for backward. Running statistics come back as new tensors (training) as in
    ``csrc_bn_act_fwd``."""
    if x.dtype not in FUSED_DTYPES or x.dim() != 4 or x.device.type != "cpu":
        raise TypeError(f"csrc_pool_bn_act_fwd: x must be a 4-D fp32/bf16 CPU tensor, got "
                        f"{x.dtype} {tuple(x.shape)} on {x.device}")
    check_same("csrc_pool_bn_act_fwd", x, {"weight": weight, "bias": bias,
                                            "running_mean": running_mean, "running_var": running_var})
    x = _nhwc(x)
    n, c, h, w = x.shape
    y = new_output((n, c, h // 2, w // 2), x.dtype, x.device, True)
    pooled = new_output((n, c, h // 2, w // 2), x.dtype, x.device, True)
    codes = _codes(n, h // 2, w // 2, c)
    stats = torch.empty(4 * c, dtype=torch.float32)
    wt, bs, rm, rv = bn_parameters("csrc_pool_bn_act_fwd", weight, bias, running_mean, running_var,
                                   training)
    native.load().pool_bn_act_forward(
        DTYPE_CODES[x.dtype], ptr(x), ptr(pooled), ptr(codes), ptr(y), ptr(stats), ptr(wt),
        ptr(bs), ptr(rm), ptr(rv), n, h, w, c, int(training), eps, momentum,
        activation(act).code)
    empty = stats.new_empty(0)
    if training and rm is not None and rv is not None:
        return y, pooled, codes, stats, rm, rv
    return y, pooled, codes, stats, empty, empty.clone()


@pool_bn_act_fwd.register_fake
def _(x, weight, bias, running_mean, running_var, training, eps, momentum, act):
    n, c, h, w = x.shape
    small = x.new_empty((n, c, h // 2, w // 2))
    k = c if training and running_mean is not None and running_var is not None else 0
    f = torch.float32
    return (small, torch.empty_like(small), small.to(torch.uint8), x.new_empty(4 * c, dtype=f),
            x.new_empty(k, dtype=f), x.new_empty(k, dtype=f))


@torch.library.custom_op("dawnbench::csrc_pool_bn_act_bwd", mutates_args=())
def pool_bn_act_bwd(
    pooled: torch.Tensor, codes: torch.Tensor, dy: torch.Tensor, stats: torch.Tensor,
    in_h: int, in_w: int, training: bool, act: str, pooled_dx: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx (N, C, in_h, in_w), dweight, dbias) of pool_bn_act_fwd; with
    ``pooled_dx``, dx is the pool's own gradient (pooled-sized, the value each
    window's max gets, to be placed by ``codes``): what the before-pool conv's
    kernels read instead of the full-size dx (csrc/conv_group.py)."""
    n, c, h, w = pooled.shape
    if dy.shape != pooled.shape or codes.shape != pooled.shape or stats.numel() != 4 * c:
        raise ValueError("csrc_pool_bn_act_bwd: dy, codes and stats must match the forward's outputs")
    if in_h // 2 != h or in_w // 2 != w:
        raise ValueError(f"csrc_pool_bn_act_bwd: input {in_h}x{in_w} does not pool to {h}x{w}")
    pooled, codes, dy = _nhwc(pooled), _nhwc(codes), _nhwc(dy.to(pooled.dtype))
    dx = new_output((n, c, *((h, w) if pooled_dx else (in_h, in_w))), pooled.dtype, pooled.device, True)
    dweight = torch.empty(c, dtype=torch.float32)
    dbias = torch.empty(c, dtype=torch.float32)
    native.load().pool_bn_act_backward(
        DTYPE_CODES[pooled.dtype], ptr(pooled), ptr(codes), ptr(dy), ptr(dx), ptr(stats),
        ptr(dweight), ptr(dbias), n, in_h, in_w, c, int(training), activation(act).code,
        int(pooled_dx))
    return dx, dweight, dbias


@pool_bn_act_bwd.register_fake
def _(pooled, codes, dy, stats, in_h, in_w, training, act, pooled_dx=False):
    n, c = pooled.shape[:2]
    f = torch.float32
    size = tuple(pooled.shape[2:]) if pooled_dx else (in_h, in_w)
    return pooled.new_empty((n, c, *size)), pooled.new_empty(c, dtype=f), pooled.new_empty(c, dtype=f)


def _setup(ctx, inputs, output) -> None:
    x, weight, bias, _rm, _rv, training, _eps, _momentum, act = inputs
    ctx.save_for_backward(output[1], output[2], output[3])
    ctx.in_hw = (x.shape[2], x.shape[3])
    ctx.training, ctx.act = training, act
    ctx.weight_dtype, ctx.bias_dtype = weight.dtype, bias.dtype


def _backward(ctx, grad_y, *_unused):
    pooled, codes, stats = ctx.saved_tensors
    dx, dweight, dbias = pool_bn_act_bwd(pooled, codes, grad_y, stats, *ctx.in_hw, ctx.training,
                                         ctx.act)
    return (dx, dweight.to(ctx.weight_dtype), dbias.to(ctx.bias_dtype), None, None, None, None,
            None, None)


pool_bn_act_fwd.register_autograd(_backward, setup_context=_setup)


def pool_bn_act(x: torch.Tensor, bn: torch.nn.BatchNorm2d, act: str = "gelu") -> torch.Tensor:
    """``bn_act(max_pool2d(x, 2), bn, act)`` with the module's state updated
    as csrc/bn_act.py's ``bn_act`` does; other dtypes (fp16) take the unfused path."""
    if x.dtype not in FUSED_DTYPES or x.device.type != "cpu":
        return bn_act(F.max_pool2d(x, 2), bn, act)
    args = bn_module_args(bn, act)
    out = pool_bn_act_fwd(x, *args)
    update_running_stats(bn, args[4], out[4], out[5])
    return out[0]


# The roofline's FLOP/byte formulas of these ops (csrc/bn_act_costs.py), also for FlopCounterMode.
register_flop_formulas(COSTS)
