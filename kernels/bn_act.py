"""The ``bn_act`` op on Triton: batch norm (training or eval) + activation.
This module is the whole of the op on Triton: its kernels, their launchers
(custom ops), the autograd and the dispatch registration.

Faces of the op:
- reference: :func:`dawnbench_fast.layer_ops.bn_act` (backend ``torch``; the
  references of the statistics and finalize steps are in the tests);
- Triton (this module), one section a step in launch order: forward =
  per-channel statistics -> finalize -> affine + activation; backward =
  reduce -> coefficients -> apply (with the 2x2 max-pool scatter the conv
  group needs); the activations: :mod:`.activations`;
- CUDA C++ and CPU: csrc/bn_act.py (custom ops ``dawnbench::csrc_bn_act_fwd``
  / ``_bwd``; csrc/bn_act.cu on CUDA tensors, the OpenMP build of the same
  math, csrc/bn_act_cpu.cpp, on CPU tensors), registered for ``--kernels
  cuda`` and ``--kernels cpu``; fused with the 2x2 max-pool before it on the
  CPU: csrc/bn_act.py's ``pool_bn_act``.
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
import triton
import triton.language as tl

from dawnbench_fast import dispatch
from dawnbench_fast.kernels import launches as L
from dawnbench_fast.kernels.activations import act_code, act_grad, apply_act
from dawnbench_fast.kernels.bn_act_costs import COSTS
from dawnbench_fast.kernels.launches import new_output, record
from dawnbench_fast.kernels.pool_window import block_pixels, window_origin
from dawnbench_fast.layer_ops import bn_act as reference
from dawnbench_fast.op_path import plain_eager
from dawnbench_fast.roofline.registry import register_flop_formulas

__all__ = ["affine_act", "bn_act", "bn_act_bwd_apply", "bn_act_bwd_reduce", "bn_bwd_coefficients",
           "bn_finalize", "channel_stats", "reference"]


# Warps of bn_act's element-wise and reduction kernels (64 x 64 tiles, 32
# elements a thread): the H100 sweep's best (docs/results/gpu-h100-2026-11-26/
# sweep: 0.402 ms of kernels over the recipe's three shapes against 0.446 with
# launches.EW_WARPS's 8). Compiled as a launch specialises them, none spills on
# sm_80 or sm_90 (kernels.report); the "4 warps spill" that had kept 8 came
# from a compile without that specialisation.
WARPS = 4


@triton.jit
def _row_tile(rows, cols, R, C):
    """The mask and element offsets of ``rows`` x ``cols`` of an R x C
    row-major matrix, the offsets in int64 (R x C may pass 2**31): every
    kernel of the op addresses its tiles so."""
    mask = (rows < R)[:, None] & (cols < C)[None, :]
    offs = rows.to(tl.int64)[:, None] * C + cols[None, :]
    return mask, offs


# -- forward 1: per-channel statistics --------------------------------------
# Sum and sum of squares of an NHWC activation viewed as R x C, accumulated in
# fp32 whatever the storage dtype. Each program reduces a contiguous chunk of
# rows; ``ATOMIC`` adds its partial into a single row with fp32 atomics (fast,
# order-dependent), otherwise every program writes its own row of partials and
# bn_finalize sums them in a fixed order (bitwise deterministic).
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
        mask, offs = _row_tile(rows, cols, R, C)
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


# -- forward 2: finalize ----------------------------------------------------
# Partial sums -> mean, 1/std, the per-channel scale/shift that affine_act
# applies, and (in training) the running-statistics update, all in one small
# launch (the backward's twin, bn_bwd_coefficients, shares its tiles). PyTorch
# conventions: the batch variance used for normalisation is biased (divide by
# n); the running variance is updated with the unbiased one (n / (n - 1));
# ``momentum`` weights the new batch statistic.
#
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


# -- forward 3: affine + activation -----------------------------------------
# The element-wise half of batch norm + activation, on scale/shift from
# bn_finalize. Also used in backward to recompute the activated conv input
# instead of storing it.
@triton.jit
def affine_act_kernel(
    x_ptr, scale_ptr, shift_ptr, y_ptr, R, C,
    ACT: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    mask, offs = _row_tile(rows, cols, R, C)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    scale = tl.load(scale_ptr + cols, mask=cmask, other=0.0)
    shift = tl.load(shift_ptr + cols, mask=cmask, other=0.0)
    y = apply_act(x * scale[None, :] + shift[None, :], ACT)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


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


# -- backward: reduce, coefficients, apply ----------------------------------
# With u = x*scale + shift, y = act(u) and g = dy * act'(u), the gradient is
# dx = g*scale + A[c] + B[c]*x, where A and B carry the dependence of the batch
# statistics on x (both zero in eval mode). Three launches: per-program
# partials of sum(g) and sum(g*x); their fixed-order sums -> d weight, d bias,
# A and B; dx, optionally scattered back through the 2x2 max-pool that preceded
# the batch norm (``POOL``; the argmax code of each window comes from the conv
# epilogue), so the conv's data/weight gradients receive the full-resolution
# gradient without another pass.
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
        mask, offs = _row_tile(rows, cols, R, C)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        g = dy * act_grad(x * scale[None, :] + shift[None, :], ACT)
        g = tl.where(mask, g, 0.0)
        acc_g += g
        acc_gx += g * x
    tl.store(pg_ptr + pid_r * C + cols, tl.sum(acc_g, axis=0), mask=cmask)
    tl.store(pgx_ptr + pid_r * C + cols, tl.sum(acc_gx, axis=0), mask=cmask)


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


@triton.jit
def bn_act_bwd_apply_kernel(
    dy_ptr, x_ptr, scale_ptr, shift_ptr, a_ptr, b_ptr, idx_ptr, dx_ptr,
    R, C, PH, PW, H, W,
    ACT: tl.constexpr, POOL: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    mask, offs = _row_tile(rows, cols, R, C)
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
