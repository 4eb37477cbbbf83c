"""The Triton backend: custom ops (one per kernel, so profiler traces carry
their names and shapes), autograd for the model-level ops, FLOP/byte costs
for the roofline, and registration with :mod:`dawnbench_fast.dispatch`.

Model-level ops registered for ``--kernels triton``:
- ``conv_group(group, x)``: conv3x3 (+2x2 max-pool +BN statistics, fused) ->
  finalize -> conv3x3 with the BN+act prologue (+statistics) -> finalize ->
  BN+act. Backward, all ours: BN+act backward with the pool scatter, the
  convs' data gradients (the forward kernel on flipped filters) and weight
  gradients (split-K implicit GEMM that recomputes the BN+act prologue);
  ``TRITON_DGRAD``/``TRITON_WGRAD`` = False switch those two GEMMs to
  ``aten.convolution_backward`` (cuDNN on a GPU).
- ``bn_act(x, bn, act)``: batch norm (training or eval) + activation.
- ``linear(x, weight)`` and ``matmul(a, b)``: the tensor-core GEMM.
- ``newton_schulz(g, steps, eps)``: Muon's orthogonalisation on that GEMM.
"""

from __future__ import annotations

import torch
import triton
from dawnbench_fast.kernels.activations import act_code
from dawnbench_fast.kernels.affine_act import affine_act_kernel
from dawnbench_fast.kernels.augment import augment_kernel
from dawnbench_fast.kernels.bn_act_backward import (
    bn_act_bwd_apply_kernel,
    bn_act_bwd_reduce_kernel,
)
from dawnbench_fast.kernels.bn_finalize import bn_finalize_kernel
from dawnbench_fast.kernels.bn_stats import channel_stats_kernel
from dawnbench_fast.kernels.conv3x3 import conv3x3_fwd_kernel
from dawnbench_fast.kernels.conv3x3_wgrad import conv3x3_wgrad_kernel
from dawnbench_fast.kernels.gemm import gemm_autotuned
from dawnbench_fast.kernels.launches import interpreting, needs_f32_math, new_output, record

from dawnbench_fast import dispatch

# None: follow torch.use_deterministic_algorithms(); True/False: force.
DETERMINISTIC_STATS: bool | None = None


def deterministic_stats() -> bool:
    """Per-tile partials instead of atomics for BN statistics?"""
    if DETERMINISTIC_STATS is not None:
        return DETERMINISTIC_STATS
    return torch.are_deterministic_algorithms_enabled()


def _dot_precision(dtype: torch.dtype, conv: bool) -> str:
    """fp32 operands use TF32 on a GPU exactly when PyTorch's own flag allows it
    for the matching op, so --kernels triton and torch agree on precision."""
    if dtype != torch.float32 or interpreting():
        return "ieee"
    allowed = torch.backends.cudnn.allow_tf32 if conv else torch.backends.cuda.matmul.allow_tf32
    return "tf32" if allowed else "ieee"


def _reduction_programs(rows: int, block_r: int) -> tuple[int, int]:
    """(programs, rows per program) for the row-chunked reductions: enough
    programs to fill a GPU, few in the interpreter (each costs Python time)."""
    target = 2 if interpreting() else 512
    blocks = triton.cdiv(rows, block_r)
    progs = max(1, min(blocks, target))
    per = triton.cdiv(blocks, progs) * block_r
    return triton.cdiv(rows, per), per


def _block_c(c: int) -> int:
    return min(64, triton.next_power_of_2(max(c, 1)))


# The interpreter runs fewer, larger programs faster; tests lower this to
# exercise tile edges.
INTERPRETER_CONV_BLOCK_M = 512
INTERPRETER_ROWS = 512


def _rows() -> int:
    """Rows per tile of the element-wise and reduction kernels."""
    return INTERPRETER_ROWS if interpreting() else 64


# 64 x 64 tiles with 8 warps (16 elements per thread): no spills in any of
# them for sm_80 or sm_90; 4 warps spill in the backward kernels.
_EW_WARPS = 8


# --------------------------------------------------------------------------
# Custom ops: one per kernel
# --------------------------------------------------------------------------
@torch.library.custom_op("dawnbench::channel_stats", mutates_args=())
def channel_stats(x2d: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel partial sums and sums of squares ([P, C] fp32) of R x C."""
    R, C = x2d.shape
    x2d = x2d.contiguous()
    progs, per = _reduction_programs(R, _rows())
    if deterministic:  # every program writes its own row
        psum = new_output((progs, C), torch.float32, x2d.device)
        psumsq = new_output((progs, C), torch.float32, x2d.device)
    else:  # atomics accumulate into zeros
        psum = torch.zeros(1, C, device=x2d.device, dtype=torch.float32)
        psumsq = torch.zeros_like(psum)
    grid = (progs, triton.cdiv(C, _block_c(C)))
    channel_stats_kernel[grid](x2d, psum, psumsq, R, C, per, ATOMIC=not deterministic,
                               BLOCK_R=_rows(), BLOCK_C=_block_c(C), num_warps=_EW_WARPS)
    record("channel_stats")
    return psum, psumsq


@channel_stats.register_fake
def _(x2d, deterministic):
    p = x2d.new_empty((torch.library.get_ctx().new_dynamic_size(), x2d.shape[1]),
                      dtype=torch.float32)
    return p, torch.empty_like(p)


@torch.library.custom_op("dawnbench::bn_finalize",
                         mutates_args=("running_mean", "running_var"))
def bn_finalize(
    psum: torch.Tensor, psumsq: torch.Tensor, count: float, weight: torch.Tensor,
    bias: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
    momentum: float, eps: float, training: bool, update_running: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sums -> (mean, invstd, scale, shift); updates running stats in training."""
    C = weight.shape[0]
    out = [new_output(C, torch.float32, weight.device) for _ in range(4)]
    unbias = count / max(count - 1.0, 1.0)
    bc = min(256, triton.next_power_of_2(C))
    bn_finalize_kernel[(triton.cdiv(C, bc),)](
        psum, psumsq, psum.shape[0], C, float(count), weight.float().contiguous(),
        bias.float().contiguous(), running_mean, running_var, out[0], out[1], out[2], out[3],
        float(momentum), float(eps), float(unbias),
        TRAINING=training, UPDATE_RUNNING=update_running and training, BLOCK_C=bc)
    record("bn_finalize")
    return out[0], out[1], out[2], out[3]


@bn_finalize.register_fake
def _(psum, psumsq, count, weight, bias, running_mean, running_var, momentum, eps, training,
      update_running):
    e = weight.new_empty(weight.shape, dtype=torch.float32)
    return e, torch.empty_like(e), torch.empty_like(e), torch.empty_like(e)


@torch.library.custom_op("dawnbench::affine_act", mutates_args=())
def affine_act(x2d: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor,
               act: str) -> torch.Tensor:
    """y = act(x * scale + shift) per channel of an R x C matrix."""
    R, C = x2d.shape
    x2d = x2d.contiguous()
    y = new_output(x2d.shape, x2d.dtype, x2d.device)
    grid = (triton.cdiv(R, _rows()), triton.cdiv(C, _block_c(C)))
    affine_act_kernel[grid](x2d, scale, shift, y, R, C, ACT=act_code(act),
                            BLOCK_R=_rows(), BLOCK_C=_block_c(C), num_warps=_EW_WARPS)
    record("affine_act")
    return y


@affine_act.register_fake
def _(x2d, scale, shift, act):
    return torch.empty_like(x2d)


@torch.library.custom_op("dawnbench::bn_act_bwd_reduce", mutates_args=())
def bn_act_bwd_reduce(dy: torch.Tensor, x: torch.Tensor, scale: torch.Tensor,
                      shift: torch.Tensor, act: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel sum(g) and sum(g*x), g = dy * act'(x*scale+shift), fp32."""
    R, C = x.shape
    x, dy = x.contiguous(), dy.contiguous()
    progs, per = _reduction_programs(R, _rows())
    pg = new_output((progs, C), torch.float32, x.device)
    pgx = new_output((progs, C), torch.float32, x.device)
    grid = (progs, triton.cdiv(C, _block_c(C)))
    bn_act_bwd_reduce_kernel[grid](dy, x, scale, shift, pg, pgx, R, C, per,
                                   ACT=act_code(act), BLOCK_R=_rows(), BLOCK_C=_block_c(C),
                                   num_warps=_EW_WARPS)
    record("bn_act_bwd_reduce")
    return pg.sum(0), pgx.sum(0)


@bn_act_bwd_reduce.register_fake
def _(dy, x, scale, shift, act):
    e = x.new_empty((x.shape[1],), dtype=torch.float32)
    return e, torch.empty_like(e)


@torch.library.custom_op("dawnbench::bn_act_bwd_apply", mutates_args=())
def bn_act_bwd_apply(dy: torch.Tensor, x: torch.Tensor, scale: torch.Tensor,
                     shift: torch.Tensor, a: torch.Tensor, b: torch.Tensor, idx: torch.Tensor,
                     full_shape: list[int], act: str) -> torch.Tensor:
    """dx = dy*act'(u)*scale + a + b*x for NHWC ``x`` [N, h, w, C]; when ``idx``
    is non-empty, x is a 2x2 max-pool output and dx is scattered into
    ``full_shape`` [N, H, W, C] through the stored argmax codes."""
    N, h, w, C = x.shape
    x, dy = x.contiguous(), dy.contiguous()
    pool = idx.numel() > 0
    H, W = full_shape[1], full_shape[2]
    if pool and (H % 2 or W % 2):  # floor-mode pool: the dropped edge gets zeros
        dx = torch.zeros(full_shape, device=x.device, dtype=x.dtype)
    else:
        dx = new_output(full_shape, x.dtype, x.device)
    R = N * h * w
    grid = (triton.cdiv(R, _rows()), triton.cdiv(C, _block_c(C)))
    bn_act_bwd_apply_kernel[grid](dy, x, scale, shift, a, b, idx if pool else x, dx,
                                  R, C, h, w, H, W, ACT=act_code(act), POOL=pool,
                                  BLOCK_R=_rows(), BLOCK_C=_block_c(C), num_warps=_EW_WARPS)
    record("bn_act_bwd_apply")
    return dx


@bn_act_bwd_apply.register_fake
def _(dy, x, scale, shift, a, b, idx, full_shape, act):
    return x.new_empty(full_shape)


def conv_blocks(cin: int, cout: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps) for the fused conv. tl.dot needs
    tiles of at least 16; BLOCK_M is a multiple of 4 (whole pooling windows).
    BLOCK_K 32 with 8 warps: the variants that compile without spills for
    sm_80 and sm_90 (python -m dawnbench_fast.kernels.report)."""
    bn = min(128, max(16, triton.next_power_of_2(cout)))
    bk = min(32, max(16, triton.next_power_of_2(cin)))
    bm = INTERPRETER_CONV_BLOCK_M if interpreting() else 128
    return bm, bn, bk, 8


def _conv3x3_launch(x, wmat, scale, shift, act, pool, stats, deterministic):
    """Launch the fused conv; shared by the pooled and unpooled custom ops."""
    N, H, W, Cin = x.shape
    Cout = wmat.shape[1]
    x = x.contiguous()
    OH, OW = (H // 2, W // 2) if pool else (H, W)
    y = new_output((N, OH, OW, Cout), x.dtype, x.device)
    idx = new_output((N, OH, OW, Cout) if pool else (0,), torch.int8, x.device)
    bm, bn, bk, warps = conv_blocks(Cin, Cout)
    rows = N * OH * OW * (4 if pool else 1)
    grid = (triton.cdiv(rows, bm), triton.cdiv(Cout, bn))
    p = (1 if not deterministic else grid[0]) if stats else 0
    alloc = torch.zeros if not deterministic else new_output  # atomics need zeros
    psum = alloc((p, Cout), dtype=torch.float32, device=x.device)
    psumsq = alloc((p, Cout), dtype=torch.float32, device=x.device)
    prologue = scale.numel() > 0
    conv3x3_fwd_kernel[grid](
        x, wmat, scale if prologue else y, shift if prologue else y, y, idx if pool else y,
        psum if stats else y, psumsq if stats else y, N, H, W, Cin, Cout, OH, OW,
        PROLOGUE=prologue, ACT=act_code(act), POOL=pool, STATS=stats,
        ATOMIC=not deterministic, F32_MATH=needs_f32_math(x.dtype),
        DOT_PRECISION=_dot_precision(x.dtype, conv=True),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=1 if interpreting() else 3)
    record("conv3x3_pool_fwd" if pool else "conv3x3_fwd")
    return y, idx, psum, psumsq


def _conv3x3_fake(x, wmat, pool, stats):
    N, H, W, _ = x.shape
    Cout = wmat.shape[1]
    OH, OW = (H // 2, W // 2) if pool else (H, W)
    y = x.new_empty((N, OH, OW, Cout))
    idx = x.new_empty((N, OH, OW, Cout) if pool else (0,), dtype=torch.int8)
    p = torch.library.get_ctx().new_dynamic_size() if stats else 0
    ps = x.new_empty((p, Cout), dtype=torch.float32)
    return y, idx, ps, torch.empty_like(ps)


@torch.library.custom_op("dawnbench::conv3x3_fwd", mutates_args=())
def conv3x3_fwd(x: torch.Tensor, wmat: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor,
                act: str, stats: bool,
                deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused conv3x3 over NHWC ``x`` [N, H, W, Cin] with ``wmat`` [9*Cin, Cout]
    (tap-major). Non-empty ``scale``/``shift`` enable the act(x*scale+shift)
    prologue. Returns (y [N, H, W, Cout], empty, partial sum, partial sum of
    squares ([P, Cout] fp32; empty without stats))."""
    return _conv3x3_launch(x, wmat, scale, shift, act, False, stats, deterministic)


@conv3x3_fwd.register_fake
def _(x, wmat, scale, shift, act, stats, deterministic):
    return _conv3x3_fake(x, wmat, False, stats)


@torch.library.custom_op("dawnbench::conv3x3_pool_fwd", mutates_args=())
def conv3x3_pool_fwd(x: torch.Tensor, wmat: torch.Tensor, scale: torch.Tensor,
                     shift: torch.Tensor, act: str, stats: bool, deterministic: bool
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """As conv3x3_fwd followed by a floor-mode 2x2 max-pool in the epilogue:
    y is [N, H//2, W//2, Cout], with the window argmax (0..3, int8) and the
    statistics of the pooled output."""
    return _conv3x3_launch(x, wmat, scale, shift, act, True, stats, deterministic)


@conv3x3_pool_fwd.register_fake
def _(x, wmat, scale, shift, act, stats, deterministic):
    return _conv3x3_fake(x, wmat, True, stats)


INTERPRETER_WGRAD_BLOCK_K = 512
INTERPRETER_WGRAD_SPLITS = 1  # tests raise it to exercise the atomic split-K path


def wgrad_blocks(cin: int, cout: int) -> tuple[int, int, int, int]:
    """(BLOCK_M over Cin, BLOCK_N over Cout, BLOCK_K over pixels, num_warps)."""
    bm = min(64, max(16, triton.next_power_of_2(cin)))
    bn = min(64, max(16, triton.next_power_of_2(cout)))
    bk = INTERPRETER_WGRAD_BLOCK_K if interpreting() else 64
    return bm, bn, bk, 8  # 8 warps: no spills with the prologue (4 warps spilled)


@torch.library.custom_op("dawnbench::conv3x3_wgrad", mutates_args=())
def conv3x3_wgrad(x: torch.Tensor, dy: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor,
                  act: str, deterministic: bool) -> torch.Tensor:
    """Weight gradient [9*Cin, Cout] (fp32, tap-major like the forward's B
    operand) of a 3x3 'same' conv with NHWC input ``x`` [N, H, W, Cin] and
    output gradient ``dy`` [N, H, W, Cout]; non-empty ``scale``/``shift``
    recompute the input as act(x*scale + shift) while loading it."""
    N, H, W, Cin = x.shape
    Cout = dy.shape[-1]
    x, dy = x.contiguous(), dy.contiguous().to(x.dtype)
    bm, bn, bk, warps = wgrad_blocks(Cin, Cout)
    tiles = 9 * triton.cdiv(Cin, bm) * triton.cdiv(Cout, bn)
    pixels = N * H * W
    # split-K: enough programs to fill a GPU; one split (plain stores) when
    # deterministic or interpreting
    if deterministic:
        splits = 1
    elif interpreting():
        splits = INTERPRETER_WGRAD_SPLITS
    else:
        splits = max(1, min(triton.cdiv(pixels, 8 * bk), triton.cdiv(1056, tiles)))
    per = triton.cdiv(triton.cdiv(pixels, splits), bk) * bk
    splits = triton.cdiv(pixels, per)
    dw = (torch.zeros((9 * Cin, Cout), device=x.device, dtype=torch.float32) if splits > 1
          else new_output((9 * Cin, Cout), torch.float32, x.device))
    prologue = scale.numel() > 0
    grid = (9 * triton.cdiv(Cin, bm), triton.cdiv(Cout, bn), splits)
    conv3x3_wgrad_kernel[grid](
        x, dy, scale if prologue else dw, shift if prologue else dw, dw, N, H, W, Cin, Cout, per,
        PROLOGUE=prologue, ACT=act_code(act), ATOMIC=splits > 1,
        F32_MATH=needs_f32_math(x.dtype), DOT_PRECISION=_dot_precision(x.dtype, conv=True),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps,
        num_stages=1 if interpreting() else 3)
    record("conv3x3_wgrad")
    return dw


@conv3x3_wgrad.register_fake
def _(x, dy, scale, shift, act, deterministic):
    return x.new_empty((9 * x.shape[-1], dy.shape[-1]), dtype=torch.float32)


@torch.library.custom_op("dawnbench::gemm", mutates_args=())
def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [M, K] @ b [K, N] (any strides), fp32 accumulation, output in a's dtype."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"dawnbench::gemm needs [M, K] @ [K, N], got {tuple(a.shape)} @ {tuple(b.shape)}")
    M, K = a.shape
    N = b.shape[1]
    if max(M * a.stride(0), K * a.stride(1), K * b.stride(0), N * b.stride(1), M * N) >= 2**31:
        raise ValueError("dawnbench::gemm uses 32-bit offsets; split operands over 2**31 elements")
    b = b.to(a.dtype)
    c = new_output((M, N), a.dtype, a.device)

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    gemm_autotuned[grid](a, b, c, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                         c.stride(0), c.stride(1), 0, 0, 1.0, 0.0, HAS_D=False,
                         F32_MATH=needs_f32_math(a.dtype),
                         DOT_PRECISION=_dot_precision(a.dtype, conv=False))
    record("gemm")
    return c


@gemm.register_fake
def _(a, b):
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.custom_op("dawnbench::gemm_axpby", mutates_args=())
def gemm_axpby(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, alpha: float,
               beta: float) -> torch.Tensor:
    """alpha * (a @ b) + beta * d in one kernel (no autograd: optimizer math)."""
    M, K = a.shape
    N = b.shape[1]
    if b.shape[0] != K or tuple(d.shape) != (M, N):
        raise ValueError(f"dawnbench::gemm_axpby needs [M, K] @ [K, N] + [M, N], got "
                         f"{tuple(a.shape)} @ {tuple(b.shape)} + {tuple(d.shape)}")
    c = new_output((M, N), a.dtype, a.device)

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    b, d = b.to(a.dtype), d.to(a.dtype)
    gemm_autotuned[grid](a, b, c, d, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                         c.stride(0), c.stride(1), d.stride(0), d.stride(1), float(alpha),
                         float(beta), HAS_D=True, F32_MATH=needs_f32_math(a.dtype),
                         DOT_PRECISION=_dot_precision(a.dtype, conv=False))
    record("gemm_axpby")
    return c


@gemm_axpby.register_fake
def _(a, b, d, alpha, beta):
    return a.new_empty((a.shape[0], b.shape[1]))


def _gemm_setup(ctx, inputs, output):
    a, b = inputs
    ctx.save_for_backward(a, b)
    ctx.b_dtype = b.dtype


def _gemm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad = grad.to(a.dtype)
    da = gemm(grad, b.to(a.dtype).t()) if ctx.needs_input_grad[0] else None
    db = gemm(a.t(), grad).to(ctx.b_dtype) if ctx.needs_input_grad[1] else None
    return da, db


gemm.register_autograd(_gemm_backward, setup_context=_gemm_setup)


# --------------------------------------------------------------------------
# Autograd: batch norm + activation, and the fused conv group
# --------------------------------------------------------------------------
def _momentum(bn: torch.nn.BatchNorm2d) -> float:
    if bn.momentum is not None:
        return float(bn.momentum)
    return 1.0 / float(bn.num_batches_tracked.item())  # cumulative average


def _bn_training(bn: torch.nn.BatchNorm2d) -> bool:
    return bn.training or bn.running_mean is None


def _bn_coefficients(g_sum, gx_sum, mean, invstd, scale, count, training):
    """From sum(g), sum(g*x): (d weight, d bias, A, B) with dx = g*scale + A + B*x.
    In training the batch mean/variance depend on x, which A and B carry."""
    g_xhat = invstd * (gx_sum - mean * g_sum)
    if not training:
        z = torch.zeros_like(g_sum)
        return g_xhat, g_sum, z, z
    b = -scale * invstd * g_xhat / count
    a = -scale * g_sum / count - b * mean
    return g_xhat, g_sum, a, b


def _finalize(psum, psumsq, count, bn, training):
    if training and bn.running_mean is not None:
        bn.num_batches_tracked.add_(1)
    rm = bn.running_mean if bn.running_mean is not None else psum.new_zeros(bn.num_features)
    rv = bn.running_var if bn.running_var is not None else psum.new_ones(bn.num_features)
    w = bn.weight if bn.weight is not None else psum.new_ones(bn.num_features)
    b = bn.bias if bn.bias is not None else psum.new_zeros(bn.num_features)
    if not training:
        psum = psumsq = psum.new_zeros(1, bn.num_features)
    return bn_finalize(psum, psumsq, float(count), w.detach(), b.detach(), rm, rv,
                       _momentum(bn) if training else 0.0, float(bn.eps), training,
                       bn.running_mean is not None)


def _empty_f32(device) -> torch.Tensor:
    return torch.empty(0, device=device, dtype=torch.float32)


class _BNAct(torch.autograd.Function):
    """Batch norm + activation on NHWC x [N, H, W, C]."""

    @staticmethod
    def forward(ctx, x, weight, bias, bn, act):
        N, H, W, C = x.shape
        x2d = x.reshape(-1, C)
        training = _bn_training(bn)
        if training:
            psum, psumsq = channel_stats(x2d, deterministic_stats())
        else:
            psum = psumsq = _empty_f32(x.device)
        mean, invstd, scale, shift = _finalize(psum, psumsq, x2d.shape[0], bn, training)
        y = affine_act(x2d, scale, shift, act)
        ctx.save_for_backward(x, mean, invstd, scale, shift)
        ctx.act, ctx.training = act, training
        return y.view(N, H, W, C)

    @staticmethod
    def backward(ctx, dy):
        x, mean, invstd, scale, shift = ctx.saved_tensors
        C = x.shape[-1]
        dy2 = dy.reshape(-1, C).to(x.dtype)
        g_sum, gx_sum = bn_act_bwd_reduce(dy2, x.reshape(-1, C), scale, shift, ctx.act)
        dw, db, a, b = _bn_coefficients(g_sum, gx_sum, mean, invstd, scale,
                                        float(dy2.shape[0]), ctx.training)
        dx = bn_act_bwd_apply(dy.to(x.dtype), x, scale, shift, a, b,
                              torch.empty(0, device=x.device, dtype=torch.int8),
                              list(x.shape), ctx.act)
        return dx, dw, db, None, None


def _nhwc(x: torch.Tensor) -> torch.Tensor:
    """NCHW-shaped tensor -> contiguous NHWC (free for channels_last input)."""
    return x.permute(0, 2, 3, 1).contiguous()


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def _wmat(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[Cout, Cin, 3, 3] -> [9*Cin, Cout], tap-major, the conv kernel's B operand."""
    return w.to(dtype).permute(2, 3, 1, 0).reshape(-1, w.shape[0]).contiguous()


# Data and weight gradients of the convs on our kernels (True) or in
# aten.convolution_backward (cuDNN on a GPU; False).
TRITON_DGRAD = True
TRITON_WGRAD = True


def _wmat_dgrad(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The data gradient of a 3x3 'same' conv is a 3x3 'same' conv of the
    output gradient with the filters flipped and in/out channels swapped."""
    return _wmat(w.flip(2, 3).transpose(0, 1), dtype)


def _conv_backward(dy, x, w, need_input, scale, shift, act):
    """(data gradient in NHWC or None, weight gradient [Cout, Cin, 3, 3]) of a
    3x3 'same' conv whose input was ``x`` (NHWC), or act(x*scale + shift)
    when ``scale`` is non-empty. Ours: data gradient = the forward kernel on
    flipped filters; weight gradient = conv3x3_wgrad with the prologue
    recomputed on load. Fallback: aten.convolution_backward (cuDNN)."""
    e = _empty_f32(dy.device)
    dx = dw = None
    if need_input and TRITON_DGRAD:
        dx = conv3x3_fwd(dy, _wmat_dgrad(w, dy.dtype), e, e, "identity", False, False)[0]
    if TRITON_WGRAD:
        wm = conv3x3_wgrad(x, dy, scale, shift, act, deterministic_stats())
        dw = wm.view(3, 3, w.shape[1], w.shape[0]).permute(3, 2, 0, 1).contiguous()
    if (need_input and dx is None) or dw is None:
        if scale.numel() > 0:  # rematerialise the activated input for aten
            x = affine_act(x.view(-1, x.shape[-1]), scale, shift, act).view(x.shape)
        gx, gw, _ = torch.ops.aten.convolution_backward(
            dy.permute(0, 3, 1, 2), x.permute(0, 3, 1, 2), w.to(x.dtype), None, [1, 1], [1, 1],
            [1, 1], False, [0, 0], 1, [need_input and dx is None, dw is None, False])
        dx = _nhwc(gx) if gx is not None else dx
        dw = gw if gw is not None else dw
    return dx, dw


class _ConvGroup(torch.autograd.Function):
    """conv3x3 -> maxpool2 -> BN -> act -> conv3x3 -> BN -> act on NHWC input."""

    @staticmethod
    def forward(ctx, x, w1, w2, bw1, bb1, bw2, bb2, group, dtype):
        N, H, W, _ = x.shape
        det = deterministic_stats()
        act = group.act
        tr1, tr2 = _bn_training(group.norm1), _bn_training(group.norm2)
        e = _empty_f32(x.device)
        y1, idx1, ps1, pq1 = conv3x3_pool_fwd(x, _wmat(w1, dtype), e, e, act, tr1, det)
        _, PH, PW, C1 = y1.shape
        mean1, inv1, sc1, sh1 = _finalize(ps1, pq1, N * PH * PW, group.norm1, tr1)
        z2, _, ps2, pq2 = conv3x3_fwd(y1, _wmat(w2, dtype), sc1, sh1, act, tr2, det)
        C2 = z2.shape[-1]
        mean2, inv2, sc2, sh2 = _finalize(ps2, pq2, N * PH * PW, group.norm2, tr2)
        out = affine_act(z2.view(-1, C2), sc2, sh2, act).view(z2.shape)
        ctx.save_for_backward(x, w1, w2, y1, idx1, z2, mean1, inv1, sc1, sh1,
                              mean2, inv2, sc2, sh2)
        ctx.act, ctx.training = act, (tr1, tr2)
        return out

    @staticmethod
    def backward(ctx, dout):
        x, w1, w2, y1, idx1, z2, mean1, inv1, sc1, sh1, mean2, inv2, sc2, sh2 = ctx.saved_tensors
        act = ctx.act
        N, PH, PW, C1 = y1.shape
        count = float(N * PH * PW)
        no_idx = torch.empty(0, device=x.device, dtype=torch.int8)
        # second BN + act
        C2 = z2.shape[-1]
        dout = dout.to(z2.dtype).contiguous()
        g, gx = bn_act_bwd_reduce(dout.view(-1, C2), z2.view(-1, C2), sc2, sh2, act)
        dbw2, dbb2, a2, b2 = _bn_coefficients(g, gx, mean2, inv2, sc2, count, ctx.training[1])
        dz2 = bn_act_bwd_apply(dout, z2, sc2, sh2, a2, b2, no_idx, list(z2.shape), act)
        # second conv: its input act(bn(y1)) is recomputed, not stored
        da1, dw2 = _conv_backward(dz2, y1, w2, True, sc1, sh1, act)
        # first BN + act, scattered back through the max-pool
        g, gx = bn_act_bwd_reduce(da1.view(-1, C1), y1.view(-1, C1), sc1, sh1, act)
        dbw1, dbb1, a1c, b1c = _bn_coefficients(g, gx, mean1, inv1, sc1, count, ctx.training[0])
        dz1 = bn_act_bwd_apply(da1, y1, sc1, sh1, a1c, b1c, idx1,
                               [N, x.shape[1], x.shape[2], C1], act)
        e = _empty_f32(x.device)
        dx, dw1 = _conv_backward(dz1, x, w1, ctx.needs_input_grad[0], e, e, act)
        return (dx, dw1.to(w1.dtype), dw2.to(w2.dtype), dbw1, dbb1, dbw2, dbb2, None, None)


# --------------------------------------------------------------------------
# Model-level ops for dispatch
# --------------------------------------------------------------------------
@dispatch.register("bn_act", "triton")
def bn_act(x: torch.Tensor, bn: torch.nn.BatchNorm2d, act: str = "gelu") -> torch.Tensor:
    """Triton batch norm + activation; x is NCHW-shaped (any memory format),
    the result is NCHW-shaped in channels_last memory."""
    y = _BNAct.apply(_nhwc(x), bn.weight, bn.bias, bn, act)
    return y.permute(0, 3, 1, 2)


@dispatch.register("conv_group", "triton")
def conv_group(group: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Triton forward/backward of a models.layers.ConvGroup (see module doc)."""
    if x.shape[-1] < 2 or x.shape[-2] < 2:
        raise ValueError(f"conv_group: input {tuple(x.shape)} is too small for the 2x2 pool")
    dtype = _compute_dtype(x)
    xh = _nhwc(x).to(dtype)
    n1, n2 = group.norm1, group.norm2
    y = _ConvGroup.apply(xh, group.conv1.weight, group.conv2.weight, n1.weight, n1.bias,
                         n2.weight, n2.bias, group, dtype)
    return y.permute(0, 3, 1, 2)


@dispatch.register("linear", "triton")
def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [*, K] @ weight[N, K].T on the Triton GEMM (autocast-aware)."""
    dtype = _compute_dtype(x)
    lead = x.shape[:-1]
    y = gemm(x.reshape(-1, x.shape[-1]).to(dtype), weight.to(dtype).t())
    return y.view(*lead, weight.shape[0])


@dispatch.register("matmul", "triton")
def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """2-D a @ b on the Triton GEMM, e.g. Newton-Schulz's X @ X.T (pass X.T:
    strides make the transpose free)."""
    return gemm(a, b)


@dispatch.register("newton_schulz", "triton")
@torch.no_grad()
def newton_schulz(g: torch.Tensor, steps: int = 3, eps: float = 1e-7,
                  coeffs: tuple[float, float, float] = (3.4445, -4.7750, 2.0315)) -> torch.Tensor:
    """Muon's quintic Newton-Schulz orthogonalisation in bf16 on the Triton GEMM,
    three kernels per iteration: G = X X^T; P = c G G + b G; X = P X + a X
    (the element-wise terms ride in the GEMM epilogue). Same contract as
    dawnbench_fast.optim.muon.newton_schulz (2-D input, bf16 result)."""
    a, b, c = coeffs
    x = g.bfloat16()
    x = x / (x.norm() + eps)
    transposed = x.size(0) > x.size(1)
    if transposed:  # iterate on the wide orientation: X X^T is the small Gram
        x = x.T
    for _ in range(steps):
        gram = gemm(x, x.T)
        poly = gemm_axpby(gram, gram, gram, c, b)
        x = gemm_axpby(poly, x, x, 1.0, a)
    return x.T if transposed else x


def _probe(device: torch.device) -> str | None:
    if device.type == "cuda":
        return None if torch.cuda.is_available() else "no CUDA device is visible"
    if device.type == "cpu" and interpreting():
        return None
    return (f"Triton kernels need a CUDA device, not {device.type} "
            "(TRITON_INTERPRET=1 runs them, slowly, in the CPU interpreter)")


dispatch.register_probe("triton", _probe)

from dawnbench_fast.kernels import costs as _costs  # noqa: E402,F401  (registers FLOP/byte formulas)


# --------------------------------------------------------------------------
# Augmentation
# --------------------------------------------------------------------------
@torch.library.custom_op("dawnbench::augment", mutates_args=())
def augment_batch(
    padded: torch.Tensor, indices: torch.Tensor, ox: torch.Tensor, oy: torch.Tensor,
    flip: torch.Tensor, cut_x: torch.Tensor, cut_y: torch.Tensor, cutout: int,
    scale: torch.Tensor, shift: torch.Tensor, size: int, out_dtype: torch.dtype,
) -> torch.Tensor:
    """[B, size, size, C] normalised batch (NHWC) from the padded uint8 dataset."""
    _, PH, PW, C = padded.shape
    B = indices.shape[0]
    out = new_output((B, size, size, C), out_dtype, padded.device)
    block = min(4096, triton.next_power_of_2(size * size * C))
    augment_kernel[(B, triton.cdiv(size * size * C, block))](
        padded, indices, ox, oy, flip, cut_x, cut_y, scale, shift, out, PH, PW, int(cutout),
        SIZE=size, C=C, BLOCK=block, num_warps=8)
    record("augment")
    return out


@augment_batch.register_fake
def _(padded, indices, ox, oy, flip, cut_x, cut_y, cutout, scale, shift, size, out_dtype):
    return padded.new_empty((indices.shape[0], size, size, padded.shape[-1]), dtype=out_dtype)


@dispatch.register("augment", "triton")
def augment(padded: torch.Tensor, indices: torch.Tensor, params, scale: torch.Tensor,
            shift: torch.Tensor, size: int = 32,
            out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Same contract as ``data.augment.augment_torch`` (NCHW-shaped result in
    channels_last memory); ``out_dtype`` fp16/bf16 writes the model's dtype
    directly instead of fp32."""
    if padded.dtype != torch.uint8 or padded.dim() != 4:
        raise ValueError("augment: the dataset must be a uint8 NHWC tensor (reflect-padded)")
    dev = padded.device

    def vec(a, dtype=torch.int32):
        return torch.as_tensor(a).to(device=dev, dtype=dtype).contiguous()

    out = augment_batch(padded.contiguous(), vec(indices, torch.int64), vec(params.ox),
                        vec(params.oy), vec(params.flip), vec(params.cut_x), vec(params.cut_y),
                        int(params.cutout), vec(scale, torch.float32), vec(shift, torch.float32),
                        size, out_dtype)
    return out.permute(0, 3, 1, 2)
