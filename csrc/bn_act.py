"""The ``bn_act`` op's CUDA C++ and CPU faces: batch norm (training or eval)
+ activation as the custom ops ``dawnbench::csrc_bn_act_fwd`` / ``_bwd`` (so
profiler traces and the roofline see them), with autograd, registered for
``--kernels cuda`` and ``--kernels cpu``; and on the CPU the op fused with the
2x2 max-pool before it, ``dawnbench::csrc_pool_bn_act_fwd`` / ``_bwd``
(:func:`pool_bn_act`, last section), which the cpu conv group
(csrc/conv_group.py) runs after its first convolution.

The math lives once, in csrc/bn_act_math.cuh (``__host__ __device__``): on
CUDA tensors csrc/bn_act.cu runs it (the extension, else CuPy: csrc/engine.py),
on CPU tensors the OpenMP loops of csrc/bn_act_cpu.cpp, or on channels_last
fp32/bf16 the vectorised NHWC loops of csrc/bn_act_pool_cpu.cpp. On the CPU it
is faster than torch's BatchNorm + activation (oneDNN/ATen), hence its
registration for the ``cpu`` backend (docs/PERFORMANCE.md).

Other faces: the reference :func:`dawnbench_fast.layer_ops.bn_act` (backend
``torch``), Triton kernels/bn_act.py. Tests: tests/ops/test_bn_act.py,
tests/ops/test_bn_act_pool.py. Costs: csrc/bn_act_costs.py. Every launch of
``csrc_bn_act_fwd``/``_bwd`` is wrapped in an nvtx range (no-ops without a
profiler).
"""

from __future__ import annotations

import numpy as np
import nvtx
import torch
import torch.nn.functional as F

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import cupy_path, native
from dawnbench_fast.csrc.bn_act_costs import COSTS
from dawnbench_fast.csrc.engine import (
    DTYPE_CODES,
    DTYPE_SUFFIX,
    NVTX_DOMAIN,
    cuda_engine,
    layout,
    new_output,
    partitions,
    ptr,
    stream_ptr,
    tile_lanes,
)
from dawnbench_fast.op_path import plain_eager
from dawnbench_fast.roofline.registry import register_flop_formulas
from dawnbench_fast.vocabulary import activation


# -- batch norm + activation: custom ops, autograd, the op ------------------
def _check_x(x: torch.Tensor, name: str) -> None:
    if x.dtype not in DTYPE_CODES:
        raise TypeError(f"{name}: x must be float32, bfloat16 or float16, got {x.dtype}")
    if x.dim() != 4:
        raise ValueError(f"{name}: x must be (N, C, H, W), got shape {tuple(x.shape)}")


def check_same(name: str, x: torch.Tensor, per_channel: dict) -> None:
    """Raw pointers go to the kernels: every tensor must be on x's device and
    per-channel ones must hold exactly C values, else memory is misread."""
    c = x.shape[1]
    for arg, t in per_channel.items():
        if t is None:
            continue
        if t.device != x.device:
            raise ValueError(f"{name}: {arg} is on {t.device} but x is on {x.device}")
        if t.numel() != c:
            raise ValueError(f"{name}: {arg} has {t.numel()} values, x has {c} channels")


def bn_parameters(
    op: str, weight: torch.Tensor, bias: torch.Tensor, running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None, training: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The fp32 contiguous BN parameters a C++ forward kernel reads: in
    training the running statistics are copies the kernel updates (functional
    ops return them), in eval they are read and must be there."""
    wt, bs = weight.float().contiguous(), bias.float().contiguous()
    if training:
        rm = running_mean.float().clone() if running_mean is not None else None
        rv = running_var.float().clone() if running_var is not None else None
        return wt, bs, rm, rv
    if running_mean is None or running_var is None:
        raise ValueError(f"{op}: eval mode needs running_mean and running_var")
    return wt, bs, running_mean.float().contiguous(), running_var.float().contiguous()


def _bn_act_fwd(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
    running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
    training: bool, eps: float, momentum: float, act: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, stats, new_running_mean, new_running_var): y = act(batchnorm(x)),
    stats = [mean | invstd | scale | bias] (4*C fp32, kept for backward).

    Functional (autograd needs that): in training mode the updated running
    statistics come back as new tensors (empty when none were given) and the
    caller copies them into the module; in eval mode they are read."""
    wt, bs, rm, rv = bn_parameters("csrc_bn_act_fwd", weight, bias, running_mean, running_var, training)
    y, stats = launch_fwd(x, wt, bs, rm, rv, training, eps, momentum, act)
    empty = stats.new_empty(0)
    if training and rm is not None and rv is not None:
        return y, stats, rm, rv
    return y, stats, empty, empty.clone()


bn_act_fwd = torch.library.custom_op("dawnbench::csrc_bn_act_fwd", _bn_act_fwd, mutates_args=())


def launch_fwd(
    x: torch.Tensor, wt: torch.Tensor, bs: torch.Tensor, rm: torch.Tensor | None,
    rv: torch.Tensor | None, training: bool, eps: float, momentum: float, act: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, stats): the forward kernel on the fp32 parameters that
    :func:`bn_parameters` prepared; in training it updates ``rm``/``rv`` in place."""
    _check_x(x, "csrc_bn_act_fwd")
    check_same("csrc_bn_act_fwd", x, {"weight": wt, "bias": bs, "running_mean": rm, "running_var": rv})
    x, cl = layout(x)
    n, c, h, w = x.shape
    y = new_output(tuple(x.shape), x.dtype, x.device, bool(cl))
    stats = torch.empty(4 * c, device=x.device, dtype=torch.float32)
    a = activation(act).code  # the template argument of the C++ kernels
    with nvtx.annotate("csrc_bn_act_fwd", domain=NVTX_DOMAIN):
        if x.device.type == "cpu":
            native.load().bn_act_forward(
                DTYPE_CODES[x.dtype], ptr(x), ptr(y), ptr(stats), ptr(wt), ptr(bs),
                ptr(rm), ptr(rv), n, c, h * w, cl, int(training), eps, momentum, a)
        else:
            lanes = tile_lanes(c, x.dtype, cl, x, y)
            p = partitions(n * h * w, c, cl, lanes > 0)
            partial = torch.empty(p * c * 2, device=x.device, dtype=torch.float32)
            shift_k = torch.empty(c, device=x.device, dtype=torch.float32)
            if cuda_engine() == "extension":
                native.load().bn_act_forward_cuda(
                    DTYPE_CODES[x.dtype], ptr(x), ptr(y), ptr(stats), ptr(wt), ptr(bs),
                    ptr(rm), ptr(rv), ptr(partial), ptr(shift_k), p, n, c, h * w, cl,
                    int(training), eps, momentum, a, stream_ptr())
            else:
                cupy_path.bn_act_forward(
                    DTYPE_SUFFIX[x.dtype], x, y, stats, wt, bs, rm, rv, partial, shift_k, p, n,
                    c, h * w, cl, int(training), eps, momentum, a, lanes)
    return y, stats


@bn_act_fwd.register_fake
def _(x, weight, bias, running_mean, running_var, training, eps, momentum, act):
    f = torch.float32
    c = x.shape[1] if training and running_mean is not None and running_var is not None else 0
    return (torch.empty_like(x), x.new_empty(4 * x.shape[1], dtype=f), x.new_empty(c, dtype=f),
            x.new_empty(c, dtype=f))


def _bn_act_bwd(
    x: torch.Tensor, dy: torch.Tensor, stats: torch.Tensor, training: bool, act: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight, dbias) of bn_act_fwd."""
    _check_x(x, "csrc_bn_act_bwd")
    if dy.shape != x.shape or dy.device != x.device:
        raise ValueError(f"csrc_bn_act_bwd: dy {tuple(dy.shape)} on {dy.device} does not match "
                         f"x {tuple(x.shape)} on {x.device}")
    if stats.numel() != 4 * x.shape[1] or stats.dtype != torch.float32:
        raise ValueError("csrc_bn_act_bwd: stats must be the 4*C fp32 tensor of the forward")
    x, cl = layout(x)
    dy = dy.to(x.dtype)
    dy = dy.contiguous(memory_format=torch.channels_last) if cl else dy.contiguous()
    n, c, h, w = x.shape
    dx = new_output(tuple(x.shape), x.dtype, x.device, bool(cl))
    dweight = torch.empty(c, device=x.device, dtype=torch.float32)
    dbias = torch.empty(c, device=x.device, dtype=torch.float32)
    a = activation(act).code  # the template argument of the C++ kernels
    with nvtx.annotate("csrc_bn_act_bwd", domain=NVTX_DOMAIN):
        if x.device.type == "cpu":
            native.load().bn_act_backward(
                DTYPE_CODES[x.dtype], ptr(x), ptr(dy), ptr(dx), ptr(stats), ptr(dweight),
                ptr(dbias), n, c, h * w, cl, int(training), a)
        else:
            lanes = tile_lanes(c, x.dtype, cl, x, dy, dx)
            p = partitions(n * h * w, c, cl, lanes > 0)
            partial = torch.empty(p * c * 2, device=x.device, dtype=torch.float32)
            coef = torch.empty(2 * c, device=x.device, dtype=torch.float32)
            if cuda_engine() == "extension":
                native.load().bn_act_backward_cuda(
                    DTYPE_CODES[x.dtype], ptr(x), ptr(dy), ptr(dx), ptr(stats),
                    ptr(dweight), ptr(dbias), ptr(partial), ptr(coef), p, n, c, h * w, cl,
                    int(training), a, stream_ptr())
            else:
                cupy_path.bn_act_backward(
                    DTYPE_SUFFIX[x.dtype], x, dy, dx, stats, dweight, dbias, partial, coef, p, n,
                    c, h * w, cl, int(training), a, lanes)
    return dx, dweight, dbias


bn_act_bwd = torch.library.custom_op("dawnbench::csrc_bn_act_bwd", _bn_act_bwd, mutates_args=())


@bn_act_bwd.register_fake
def _(x, dy, stats, training, act):
    c = x.shape[1]
    f = torch.float32
    return torch.empty_like(x), x.new_empty(c, dtype=f), x.new_empty(c, dtype=f)


def _bn_setup(ctx, inputs, output) -> None:
    x, weight, bias, _rm, _rv, training, _eps, _momentum, act = inputs
    ctx.save_for_backward(x, output[1])
    ctx.training, ctx.act = training, act
    ctx.weight_dtype, ctx.bias_dtype = weight.dtype, bias.dtype


def _bn_backward(ctx, grad_y, _grad_stats, _grad_rm, _grad_rv):
    x, stats = ctx.saved_tensors
    bwd = _bn_act_bwd if plain_eager() else bn_act_bwd
    dx, dweight, dbias = bwd(x, grad_y, stats, ctx.training, ctx.act)
    return (dx, dweight.to(ctx.weight_dtype), dbias.to(ctx.bias_dtype), None, None, None, None,
            None, None)


bn_act_fwd.register_autograd(_bn_backward, setup_context=_bn_setup)


class _BNActEager(torch.autograd.Function):
    """The eager path without the custom-op registration (dawnbench_fast/op_path.py):
    the same kernels, with the module's fp32 running statistics updated in
    place by the forward kernel instead of copied out and back."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, training, eps, momentum, act):
        y, stats = launch_fwd(x, weight.float().contiguous(), bias.float().contiguous(), running_mean,
                              running_var, training, eps, momentum, act)
        ctx.save_for_backward(x, stats)
        ctx.training, ctx.act = training, act
        ctx.weight_dtype, ctx.bias_dtype = weight.dtype, bias.dtype
        return y

    @staticmethod
    def backward(ctx, grad_y):
        return _bn_backward(ctx, grad_y, None, None, None)


def _stats_in_place(t: torch.Tensor | None) -> bool:
    return t is None or (t.dtype == torch.float32 and t.is_contiguous())


def bn_act(x: torch.Tensor, bn: torch.nn.BatchNorm2d, act: str = "gelu") -> torch.Tensor:
    """Same contract as the reference ``models.layers.bn_act`` (module state
    updated the same way: running stats and num_batches_tracked)."""
    args = bn_module_args(bn, act)
    weight, bias, rm, rv, use_batch = args[:5]
    if plain_eager() and (not use_batch or (_stats_in_place(rm) and _stats_in_place(rv))):
        if not use_batch:  # eval reads the statistics: fp32 contiguous copies as the custom op takes
            _, _, rm, rv = bn_parameters("csrc_bn_act_fwd", weight, bias, rm, rv, False)
        return _BNActEager.apply(x, weight, bias, rm, rv, *args[4:])
    y, _, new_rm, new_rv = bn_act_fwd(x, *args)
    update_running_stats(bn, use_batch, new_rm, new_rv)
    return y


def bn_module_args(bn: torch.nn.BatchNorm2d, act: str) -> tuple:
    """A BatchNorm2d module as the functional C++ ops take it: (weight, bias,
    running_mean, running_var, use_batch_stats, eps, momentum, act), counting
    the batch as nn.BatchNorm2d does (num_batches_tracked, cumulative momentum)."""
    activation(act)  # one-line ValueError for an unknown name, before any state changes
    use_batch = bn.training or not bn.track_running_stats
    momentum = bn.momentum
    if bn.training and bn.track_running_stats and bn.num_batches_tracked is not None:
        bn.num_batches_tracked.add_(1)
        if momentum is None:  # cumulative moving average, as nn.BatchNorm2d
            momentum = 1.0 / float(bn.num_batches_tracked)
    weight = bn.weight if bn.weight is not None else torch.ones_like(bn.running_mean)
    bias = bn.bias if bn.bias is not None else torch.zeros_like(bn.running_mean)
    return (weight, bias, bn.running_mean, bn.running_var, use_batch, float(bn.eps),
            float(momentum or 0.0), act)


def update_running_stats(bn: torch.nn.BatchNorm2d, use_batch: bool, new_rm: torch.Tensor,
                         new_rv: torch.Tensor) -> None:
    """Copy the running statistics a functional op returned into the module."""
    if use_batch and new_rm.numel():
        with torch.no_grad():
            bn.running_mean.copy_(new_rm)
            bn.running_var.copy_(new_rv)


# -- fused with the 2x2 max-pool before it (CPU) ----------------------------
# Reference: ``layer_ops.bn_act(F.max_pool2d(x, 2), bn, act)``. Why fused: the
# separate ops made 5 passes over memory forward (pool, its int64 indices,
# statistics, normalise) and 4 backward, and ATen's bf16 max-pool and its
# backward ran at 1-2 GB/s here (docs/journal/, the fused passes' period).
# Fused: forward reads x once to write the pooled tensor, a one-byte argmax
# code per pooled element and the batch statistics, then one pass normalises
# and activates; backward is one reduction pass over (pooled, dy) and one pass
# writing the full-size dx. Only the pooled tensor, the codes and 4*C
# statistics are kept for backward.
#
# The results are bit-identical to ATen's max-pool followed by the csrc
# ``bn_act`` above (same tie rule, same summation order, same element math).
# fp32 and bf16 storage; channels_last (NHWC) memory (other layouts are made
# so first).
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


def _pool_setup(ctx, inputs, output) -> None:
    x, weight, bias, _rm, _rv, training, _eps, _momentum, act = inputs
    ctx.save_for_backward(output[1], output[2], output[3])
    ctx.in_hw = (x.shape[2], x.shape[3])
    ctx.training, ctx.act = training, act
    ctx.weight_dtype, ctx.bias_dtype = weight.dtype, bias.dtype


def _pool_backward(ctx, grad_y, *_unused):
    pooled, codes, stats = ctx.saved_tensors
    dx, dweight, dbias = pool_bn_act_bwd(pooled, codes, grad_y, stats, *ctx.in_hw, ctx.training,
                                         ctx.act)
    return (dx, dweight.to(ctx.weight_dtype), dbias.to(ctx.bias_dtype), None, None, None, None,
            None, None)


pool_bn_act_fwd.register_autograd(_pool_backward, setup_context=_pool_setup)


def pool_bn_act(x: torch.Tensor, bn: torch.nn.BatchNorm2d, act: str = "gelu") -> torch.Tensor:
    """``bn_act(max_pool2d(x, 2), bn, act)`` with the module's state updated
    as :func:`bn_act` does; other dtypes (fp16) take the unfused path."""
    if x.dtype not in FUSED_DTYPES or x.device.type != "cpu":
        return bn_act(F.max_pool2d(x, 2), bn, act)
    args = bn_module_args(bn, act)
    out = pool_bn_act_fwd(x, *args)
    update_running_stats(bn, args[4], out[4], out[5])
    return out[0]


# -- registration ------------------------------------------------------------
dispatch.register("bn_act", "cuda")(bn_act)
dispatch.register("bn_act", "cpu")(bn_act)

# The roofline's FLOP/byte formulas of these ops (csrc/bn_act_costs.py), also for FlopCounterMode:
# registered after the definitions, because torch attaches formulas to existing ops only.
register_flop_formulas(COSTS)
