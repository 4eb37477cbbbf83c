"""The ``bn_act`` op on Triton: batch norm (training or eval) + activation.
Start here: this module holds the op's custom ops, autograd and dispatch
registration, and imports its kernels and references.

Faces of the op:
- reference: :func:`dawnbench_fast.layer_ops.bn_act` (backend ``torch``; the
  kernel-level references ``*_reference`` sit beside each kernel below);
- Triton (this module), kernels in small files:
  :mod:`.bn_act_stats` (per-channel sum / sum of squares), :mod:`.bn_act_finalize`
  (sums -> mean, invstd, scale, shift; running stats), :mod:`.bn_act_affine`
  (y = act(x*scale + shift)), :mod:`.bn_act_backward` (reduce + apply, with
  the 2x2 max-pool scatter the conv group needs), :mod:`.activations`;
- CUDA C++ and CPU: csrc/bn_act.py (custom ops ``dawnbench::csrc_bn_act_fwd``
  / ``_bwd``; csrc/bn_act.cu on CUDA tensors, the OpenMP build of the same
  math, csrc/bn_act_cpu.cpp, on CPU tensors), registered for ``--kernels
  cuda`` and ``--kernels cpu``; fused with the 2x2 max-pool before it on the
  CPU: csrc/bn_act_pool.py.
Tests: tests/ops/test_bn_act.py. Costs: kernels/bn_act_costs.py.

The kernels are custom ops (``dawnbench::<name>``) so that profiler traces
carry their names and the roofline can cost them; each allocates its
outputs, launches and counts the launch (``launch_counts``). An eager call
with no profiler, dispatch mode or compile launches the same functions
without the custom-op registration (:func:`launchers`,
dawnbench_fast/op_path.py: the registration's host time exceeded the
kernels' on an H200). Batch-norm
statistics and running stats are handled by the autograd here, so the kernels
stay functional. kernels/conv_group.py reuses these ops for its fused BN.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from dawnbench_fast import dispatch
from dawnbench_fast.kernels import launches as L
from dawnbench_fast.kernels.activations import act_code
from dawnbench_fast.kernels.bn_act_affine import affine_act_kernel, affine_act_reference
from dawnbench_fast.kernels.bn_act_backward import (
    bn_act_backward_reference,
    bn_act_bwd_apply_kernel,
    bn_act_bwd_reduce_kernel,
)
from dawnbench_fast.kernels.bn_act_costs import COSTS
from dawnbench_fast.kernels.bn_act_finalize import (
    bn_bwd_coef_kernel,
    bn_bwd_coef_reference,
    bn_finalize_kernel,
    bn_finalize_reference,
)
from dawnbench_fast.kernels.bn_act_stats import channel_stats_kernel, channel_stats_reference
from dawnbench_fast.kernels.launches import new_output, record
from dawnbench_fast.layer_ops import bn_act as reference
from dawnbench_fast.op_path import plain_eager
from dawnbench_fast.roofline.registry import register_flop_formulas

__all__ = ["affine_act", "affine_act_reference", "bn_act", "bn_act_backward_reference", "bn_act_bwd_apply",
           "bn_act_bwd_reduce", "bn_bwd_coef_reference", "bn_bwd_coefficients", "bn_finalize",
           "bn_finalize_reference", "channel_stats", "channel_stats_reference", "reference"]


# Warps of bn_act's element-wise and reduction kernels (64 x 64 tiles, 32
# elements a thread): the H100 sweep's best (docs/results/gpu-h100-2026-11-26/
# sweep: 0.402 ms of kernels over the recipe's three shapes against 0.446 with
# launches.EW_WARPS's 8). Compiled as a launch specialises them, none spills on
# sm_80 or sm_90 (kernels.report); the "4 warps spill" that had kept 8 came
# from a compile without that specialisation.
WARPS = 4


def _channel_stats(x2d: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel partial sums and sums of squares ([P, C] fp32) of R x C."""
    R, C = x2d.shape
    x2d = x2d.contiguous()
    progs, per = L.reduction_programs(R, L.ew_rows())
    if deterministic:  # every program writes its own row
        psum = new_output((progs, C), torch.float32, x2d.device)
        psumsq = new_output((progs, C), torch.float32, x2d.device)
    else:  # atomics accumulate into zeros
        psum = torch.zeros(1, C, device=x2d.device, dtype=torch.float32)
        psumsq = torch.zeros_like(psum)
    grid = (progs, L.cdiv(C, L.block_c(C)))
    channel_stats_kernel[grid](x2d, psum, psumsq, R, C, per, ATOMIC=not deterministic,
                               BLOCK_R=L.ew_rows(), BLOCK_C=L.block_c(C), num_warps=WARPS)
    record("channel_stats")
    return psum, psumsq


channel_stats = torch.library.custom_op("dawnbench::channel_stats", _channel_stats,
                                        mutates_args=())


@channel_stats.register_fake
def _(x2d, deterministic):
    p = x2d.new_empty((torch.library.get_ctx().new_dynamic_size(), x2d.shape[1]),
                      dtype=torch.float32)
    return p, torch.empty_like(p)


def _bn_finalize(
    psum: torch.Tensor, psumsq: torch.Tensor, count: float, weight: torch.Tensor,
    bias: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
    momentum: float, eps: float, training: bool, update_running: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sums -> (mean, invstd, scale, shift); updates running stats in training."""
    C = weight.shape[0]
    out = [new_output(C, torch.float32, weight.device) for _ in range(4)]
    unbias = count / max(count - 1.0, 1.0)
    bp, bc = finalize_tile(C, psum.shape[0])
    bn_finalize_kernel[(L.cdiv(C, bc),)](
        psum, psumsq, psum.shape[0], C, float(count), weight.float().contiguous(),
        bias.float().contiguous(), running_mean, running_var, out[0], out[1], out[2], out[3],
        float(momentum), float(eps), float(unbias),
        TRAINING=training, UPDATE_RUNNING=update_running and training, BLOCK_P=bp, BLOCK_C=bc,
        num_warps=FINALIZE_WARPS)
    record("bn_finalize")
    return out[0], out[1], out[2], out[3]


bn_finalize = torch.library.custom_op("dawnbench::bn_finalize", _bn_finalize,
                                      mutates_args=("running_mean", "running_var"))


@bn_finalize.register_fake
def _(psum, psumsq, count, weight, bias, running_mean, running_var, momentum, eps, training,
      update_running):
    e = weight.new_empty(weight.shape, dtype=torch.float32)
    return e, torch.empty_like(e), torch.empty_like(e), torch.empty_like(e)


def _affine_act(x2d: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor,
               act: str) -> torch.Tensor:
    """y = act(x * scale + shift) per channel of an R x C matrix."""
    R, C = x2d.shape
    x2d = x2d.contiguous()
    y = new_output(x2d.shape, x2d.dtype, x2d.device)
    grid = (L.cdiv(R, L.ew_rows()), L.cdiv(C, L.block_c(C)))
    affine_act_kernel[grid](x2d, scale, shift, y, R, C, ACT=act_code(act),
                            BLOCK_R=L.ew_rows(), BLOCK_C=L.block_c(C), num_warps=WARPS)
    record("affine_act")
    return y


affine_act = torch.library.custom_op("dawnbench::affine_act", _affine_act,
                                     mutates_args=())


@affine_act.register_fake
def _(x2d, scale, shift, act):
    return torch.empty_like(x2d)


# The finalize kernels read a [P, C] fp32 table of partials (P = the reduction's
# programs, launches.REDUCTION_PROGRAMS: 512) in steps of BLOCK_P rows, one program
# per BLOCK_C channels. With 64 x 64 steps one program per 64 channels made eight
# dependent loads: bn_finalize and bn_bwd_coef took 15 us each of bn_act's 196 us of
# kernels at C=64 @15 px, and 17 of its 57 us at C=256 @3 px (H100, 2026-11-26,
# docs/results/gpu-h100-2026-11-26b), for tables of 0.26-1 MB. Tall, narrow steps
# (up to 512 rows x 16 channels) read the table in one step with 4-16 programs.
FINALIZE_ROWS = 512
FINALIZE_TILE = 8192  # elements a program loads from each of its two tables a step
FINALIZE_WARPS = 8  # 64 fp32 accumulators a thread: no spills (kernels.report)


def finalize_tile(c: int, p: int) -> tuple[int, int]:
    """(BLOCK_P, BLOCK_C) of the finalize kernels for ``p`` rows of ``c``
    channels: all rows (up to FINALIZE_ROWS) a step, as many channels (16 to
    64) as FINALIZE_TILE leaves."""
    bp = min(FINALIZE_ROWS, L.next_power_of_2(max(p, 1)))
    return bp, min(L.next_power_of_2(c), 64, max(16, FINALIZE_TILE // bp))


def _bn_bwd_coefficients(
    pg: torch.Tensor, pgx: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor,
    scale: torch.Tensor, count: float, training: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Partials [P, C] of sum(g), sum(g*x) -> (d weight, d bias, A, B), with
    dx = g*scale + A + B*x; one launch, summed in a fixed order."""
    C = pg.shape[1]
    out = [new_output(C, torch.float32, pg.device) for _ in range(4)]
    bp, bc = finalize_tile(C, pg.shape[0])
    bn_bwd_coef_kernel[(L.cdiv(C, bc),)](
        pg, pgx, pg.shape[0], C, float(count), mean, invstd, scale, out[0], out[1], out[2], out[3],
        TRAINING=training, BLOCK_P=bp, BLOCK_C=bc, num_warps=FINALIZE_WARPS)
    record("bn_bwd_coefficients")
    return out[0], out[1], out[2], out[3]


bn_bwd_coefficients = torch.library.custom_op("dawnbench::bn_bwd_coefficients", _bn_bwd_coefficients,
                                              mutates_args=())


@bn_bwd_coefficients.register_fake
def _(pg, pgx, mean, invstd, scale, count, training):
    e = pg.new_empty((pg.shape[1],), dtype=torch.float32)
    return e, torch.empty_like(e), torch.empty_like(e), torch.empty_like(e)


def _bn_act_bwd_reduce(dy: torch.Tensor, x: torch.Tensor, scale: torch.Tensor,
                      shift: torch.Tensor, act: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-program partials [P, C] (fp32) of sum(g) and sum(g*x), g = dy *
    act'(x*scale+shift): bn_bwd_coefficients sums them in a fixed order."""
    R, C = x.shape
    x, dy = x.contiguous(), dy.contiguous()
    progs, per = L.reduction_programs(R, L.ew_rows())
    pg = new_output((progs, C), torch.float32, x.device)
    pgx = new_output((progs, C), torch.float32, x.device)
    grid = (progs, L.cdiv(C, L.block_c(C)))
    bn_act_bwd_reduce_kernel[grid](dy, x, scale, shift, pg, pgx, R, C, per,
                                   ACT=act_code(act), BLOCK_R=L.ew_rows(), BLOCK_C=L.block_c(C),
                                   num_warps=WARPS)
    record("bn_act_bwd_reduce")
    return pg, pgx


bn_act_bwd_reduce = torch.library.custom_op("dawnbench::bn_act_bwd_reduce", _bn_act_bwd_reduce,
                                            mutates_args=())


@bn_act_bwd_reduce.register_fake
def _(dy, x, scale, shift, act):
    p = x.new_empty((torch.library.get_ctx().new_dynamic_size(), x.shape[1]), dtype=torch.float32)
    return p, torch.empty_like(p)


def _bn_act_bwd_apply(dy: torch.Tensor, x: torch.Tensor, scale: torch.Tensor,
                     shift: torch.Tensor, a: torch.Tensor, b: torch.Tensor, idx: torch.Tensor,
                     full_shape: list[int], act: str) -> torch.Tensor:
    """dx = dy*act'(u)*scale + a + b*x for NHWC ``x`` [N, h, w, C]; when ``idx``
    is non-empty, x is a 2x2 max-pool output and dx is scattered into
    ``full_shape`` [N, H, W, C] through the stored argmax codes."""
    N, h, w, C = x.shape
    x, dy = x.contiguous(), dy.contiguous()
    pool = idx.numel() > 0
    H, W = full_shape[1], full_shape[2]
    dx = new_output(full_shape, x.dtype, x.device)
    if pool:  # the kernel writes every window; a floor-mode pool's dropped edge gets zeros
        # (zeroing only the edge: a memset of the whole dx was a pass over memory)
        if H % 2:
            dx[:, H - 1].zero_()
        if W % 2:
            dx[:, : H - H % 2, W - 1].zero_()
    R = N * h * w
    grid = (L.cdiv(R, L.ew_rows()), L.cdiv(C, L.block_c(C)))
    bn_act_bwd_apply_kernel[grid](dy, x, scale, shift, a, b, idx if pool else x, dx,
                                  R, C, h, w, H, W, ACT=act_code(act), POOL=pool,
                                  BLOCK_R=L.ew_rows(), BLOCK_C=L.block_c(C), num_warps=WARPS)
    record("bn_act_bwd_apply")
    return dx


bn_act_bwd_apply = torch.library.custom_op("dawnbench::bn_act_bwd_apply", _bn_act_bwd_apply,
                                           mutates_args=())


@bn_act_bwd_apply.register_fake
def _(dy, x, scale, shift, a, b, idx, full_shape, act):
    return x.new_empty(full_shape)


# -- the two paths to the same launches (dawnbench_fast/op_path.py) ---------
PLAIN = SimpleNamespace(channel_stats=_channel_stats, bn_finalize=_bn_finalize, affine_act=_affine_act,
                        bn_bwd_coefficients=_bn_bwd_coefficients, bn_act_bwd_reduce=_bn_act_bwd_reduce,
                        bn_act_bwd_apply=_bn_act_bwd_apply)
CUSTOM = SimpleNamespace(channel_stats=channel_stats, bn_finalize=bn_finalize, affine_act=affine_act,
                         bn_bwd_coefficients=bn_bwd_coefficients, bn_act_bwd_reduce=bn_act_bwd_reduce,
                         bn_act_bwd_apply=bn_act_bwd_apply)


def launchers() -> SimpleNamespace:
    """This call's launch functions: the plain ones in eager mode with nobody
    looking, else the custom ops (traced, profiled, costed)."""
    return PLAIN if plain_eager() else CUSTOM


# -- autograd ----------------------------------------------------------------
def _momentum(bn: torch.nn.BatchNorm2d) -> float:
    if bn.momentum is not None:
        return float(bn.momentum)
    return 1.0 / float(bn.num_batches_tracked.item())  # cumulative average


def bn_training(bn: torch.nn.BatchNorm2d) -> bool:
    """Does ``bn`` normalise with batch statistics (as nn.BatchNorm2d decides)?"""
    return bn.training or bn.running_mean is None


def finalize(psum, psumsq, count, bn, training, k: SimpleNamespace | None = None):
    """bn_finalize (of the launchers ``k``, default this call's) with ``bn``'s
    parameters and running stats (num_batches_tracked counted as
    nn.BatchNorm2d does): (mean, invstd, scale, shift)."""
    if training and bn.running_mean is not None:
        bn.num_batches_tracked.add_(1)
    rm = bn.running_mean if bn.running_mean is not None else psum.new_zeros(bn.num_features)
    rv = bn.running_var if bn.running_var is not None else psum.new_ones(bn.num_features)
    w = bn.weight if bn.weight is not None else psum.new_ones(bn.num_features)
    b = bn.bias if bn.bias is not None else psum.new_zeros(bn.num_features)
    if not training:
        psum = psumsq = psum.new_zeros(1, bn.num_features)
    return (k or launchers()).bn_finalize(
        psum, psumsq, float(count), w.detach(), b.detach(), rm, rv,
        _momentum(bn) if training else 0.0, float(bn.eps), training, bn.running_mean is not None)


def empty_f32(device) -> torch.Tensor:
    """The empty tensor that switches a kernel's optional operand off."""
    return torch.empty(0, device=device, dtype=torch.float32)


class _BNAct(torch.autograd.Function):
    """Batch norm + activation on NHWC x [N, H, W, C]."""

    @staticmethod
    def forward(ctx, x, weight, bias, bn, act):
        N, H, W, C = x.shape
        x2d = x.reshape(-1, C)
        training = bn_training(bn)
        k = launchers()
        if training:  # per-program partials, summed in a fixed order: fast and deterministic
            psum, psumsq = k.channel_stats(x2d, True)
        else:
            psum = psumsq = empty_f32(x.device)
        mean, invstd, scale, shift = finalize(psum, psumsq, x2d.shape[0], bn, training, k)
        y = k.affine_act(x2d, scale, shift, act)
        ctx.save_for_backward(x, mean, invstd, scale, shift)
        ctx.act, ctx.training = act, training
        return y.view(N, H, W, C)

    @staticmethod
    def backward(ctx, dy):
        x, mean, invstd, scale, shift = ctx.saved_tensors
        C = x.shape[-1]
        k = launchers()
        dy = dy.to(x.dtype)
        dy2 = dy.reshape(-1, C)
        pg, pgx = k.bn_act_bwd_reduce(dy2, x.reshape(-1, C), scale, shift, ctx.act)
        dw, db, a, b = k.bn_bwd_coefficients(pg, pgx, mean, invstd, scale, float(dy2.shape[0]),
                                             ctx.training)
        dx = k.bn_act_bwd_apply(dy, x, scale, shift, a, b,
                                torch.empty(0, device=x.device, dtype=torch.int8),
                                list(x.shape), ctx.act)
        return dx, dw, db, None, None


# -- the op ------------------------------------------------------------------
@dispatch.register("bn_act", "triton")
def bn_act(x: torch.Tensor, bn: torch.nn.BatchNorm2d, act: str = "gelu") -> torch.Tensor:
    """Triton batch norm + activation; x is NCHW-shaped (any memory format),
    the result is NCHW-shaped in channels_last memory."""
    y = _BNAct.apply(L.nhwc(x), bn.weight, bn.bias, bn, act)
    return y.permute(0, 3, 1, 2)


# The roofline's FLOP/byte formulas of these ops (kernels/bn_act_costs.py), also for FlopCounterMode:
# registered after the definitions, because torch attaches formulas to existing ops only.

register_flop_formulas(COSTS)
