"""The ``bias_act`` op on Triton: y = act(x + bias[None, :, None, None]) on an
(N, C, H, W) tensor in either memory format, forward and backward. Start
here: this module holds the kernels, the custom ops, the autograd and the
dispatch registration, and imports the reference.

Both layouts are one row-major matrix [R, K]: channels_last is (N*H*W) x C
with the channel in the column; NCHW is (N*C) x (H*W) with the channel
``row % C``. The math is fp32 (x and bias widened on load), the result is
rounded once to x's dtype, as the reference does; the activation and its
derivative are kernels/activations.py's (as bn_act's kernels use them).

Faces of the op:
- reference: :func:`dawnbench_fast.layer_ops.bias_act` (backend ``torch``;
  imported here as ``reference``);
- Triton (this module): ``bias_act_fwd_kernel`` as ``dawnbench::bias_act``,
  ``bias_act_bwd_kernel`` (dx and per-channel partial sums of it, reduced in
  a fixed order) as ``dawnbench::bias_act_bwd``;
- CUDA C++ and CPU: csrc/bias_act.py (``dawnbench::csrc_bias_act`` and
  ``_bwd``; csrc/bias_act.cu on CUDA tensors, the OpenMP loops of
  csrc/bias_act_cpu.cpp on CPU tensors, both around csrc/bias_act_math.cuh).
Tests: tests/ops/test_bias_act.py. Costs: kernels/bias_act_costs.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dawnbench_fast import dispatch
from dawnbench_fast.kernels import launches as L
from dawnbench_fast.kernels.activations import act_grad, apply_act
from dawnbench_fast.kernels.bias_act_costs import COSTS
from dawnbench_fast.kernels.launches import new_output, record
from dawnbench_fast.layer_ops import bias_act as reference
from dawnbench_fast.layer_ops import check_bias_act, register_bias_act_autograd
from dawnbench_fast.roofline.registry import register_flop_formulas

__all__ = ["bias_act", "bias_act_bwd", "bias_act_bwd_kernel", "bias_act_fwd", "bias_act_fwd_kernel",
           "reference"]


@triton.jit
def _tile(bias_ptr, rows, cols, R, K, C, CL: tl.constexpr):
    """(mask, offsets, bias) of one [BLOCK_R, BLOCK_K] tile of the [R, K] matrix."""
    mask = (rows < R)[:, None] & (cols < K)[None, :]
    offs = rows.to(tl.int64)[:, None] * K + cols[None, :]
    if CL:
        ch = cols[None, :] + rows[:, None] * 0
    else:
        ch = rows[:, None] % C + cols[None, :] * 0
    return mask, offs, tl.load(bias_ptr + ch, mask=mask, other=0.0)


@triton.jit
def bias_act_fwd_kernel(
    x_ptr, bias_ptr, y_ptr, R, K, C,
    ACT: tl.constexpr, CL: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask, offs, b = _tile(bias_ptr, rows, cols, R, K, C, CL)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, apply_act(x + b, ACT).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _grad_tile(dy_ptr, x_ptr, bias_ptr, dx_ptr, rows, cols, R, K, C,
               ACT: tl.constexpr, CL: tl.constexpr):
    """Stores dx = dy * act'(x + b) of one tile; returns it in fp32 (0 off the edge)."""
    mask, offs, b = _tile(bias_ptr, rows, cols, R, K, C, CL)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.where(mask, dy * act_grad(x + b, ACT), 0.0)
    tl.store(dx_ptr + offs, g.to(dx_ptr.dtype.element_ty), mask=mask)
    return g


@triton.jit
def bias_act_bwd_kernel(
    dy_ptr, x_ptr, bias_ptr, dx_ptr, part_ptr, R, K, C, span,
    ACT: tl.constexpr, CL: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """dx, and fp32 partial sums of it along the channel's other axis.
    CL: program (i, j) walks rows [i*span, (i+1)*span) of column block j and
    writes part[i, cols]; NCHW: program (i, j) walks columns [j*span,
    (j+1)*span) of row block i and writes part[j, rows]."""
    if CL:
        cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_R, BLOCK_K), tl.float32)
        start = tl.program_id(0) * span
        for r0 in range(start, start + span, BLOCK_R):
            rows = r0 + tl.arange(0, BLOCK_R)
            acc += _grad_tile(dy_ptr, x_ptr, bias_ptr, dx_ptr, rows, cols, R, K, C, ACT, CL)
        tl.store(part_ptr + tl.program_id(0) * K + cols, tl.sum(acc, axis=0), mask=cols < K)
    else:
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        acc = tl.zeros((BLOCK_R, BLOCK_K), tl.float32)
        start = tl.program_id(1) * span
        for k0 in range(start, start + span, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            acc += _grad_tile(dy_ptr, x_ptr, bias_ptr, dx_ptr, rows, cols, R, K, C, ACT, CL)
        tl.store(part_ptr + tl.program_id(1) * R + rows, tl.sum(acc, axis=1), mask=rows < R)


def channels_last(x: torch.Tensor) -> bool:
    """Whether x is read as channels_last (dense NHWC memory that is not also NCHW)."""
    return not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)


def _matrix(x: torch.Tensor, cl: bool) -> tuple[torch.Tensor, int, int]:
    """(x dense in its layout, R, K) of the [R, K] matrix the kernels walk."""
    n, c, h, w = x.shape
    if cl:
        return x, n * h * w, c
    return x.contiguous(), n * c, h * w


def _like(x: torch.Tensor, cl: bool) -> torch.Tensor:
    """A (poisonable) output of x's shape and dtype in the layout the kernels write."""
    n, c, h, w = x.shape
    if cl:
        return new_output((n, h, w, c), x.dtype, x.device).permute(0, 3, 1, 2)
    return new_output((n, c, h, w), x.dtype, x.device)


def _fmt(cl: bool) -> torch.memory_format:
    return torch.channels_last if cl else torch.contiguous_format


@torch.library.custom_op("dawnbench::bias_act", mutates_args=())
def bias_act_fwd(x: torch.Tensor, bias: torch.Tensor, act: str) -> torch.Tensor:
    """act(x + bias[c]) in x's dtype; channels_last in, channels_last out."""
    a = check_bias_act("bias_act", x, bias, act)
    cl = channels_last(x)
    x, R, K = _matrix(x, cl)
    y = _like(x, cl)
    bk = L.block_c(K)
    grid = (L.cdiv(R, L.ew_rows()), L.cdiv(K, bk))
    bias_act_fwd_kernel[grid](x, bias.float().contiguous(), y, R, K, x.shape[1], ACT=a.code, CL=cl,
                              BLOCK_R=L.ew_rows(), BLOCK_K=bk, num_warps=L.EW_WARPS)
    record("bias_act_fwd")
    return y


@bias_act_fwd.register_fake
def _(x, bias, act):
    return torch.empty_like(x, memory_format=_fmt(channels_last(x)))


@torch.library.custom_op("dawnbench::bias_act_bwd", mutates_args=())
def bias_act_bwd(dy: torch.Tensor, x: torch.Tensor, bias: torch.Tensor,
                 act: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx in x's dtype and layout, dbias fp32 [C]) of bias_act_fwd."""
    a = check_bias_act("bias_act_bwd", x, bias, act)
    if dy.shape != x.shape:
        raise ValueError(f"bias_act_bwd: dy {tuple(dy.shape)} does not match x {tuple(x.shape)}")
    cl = channels_last(x)
    x, R, K = _matrix(x, cl)
    dy = dy.to(x.dtype).contiguous(memory_format=_fmt(cl))
    dx = _like(x, cl)
    br, bk = L.ew_rows(), L.block_c(K)
    n, c = x.shape[:2]
    if cl:  # partial sums over row chunks: [progs, C]
        progs, span = L.reduction_programs(R, br)
        grid = (progs, L.cdiv(K, bk))
        part = new_output((progs, K), torch.float32, x.device)
    else:  # partial sums over column chunks: [progs, N*C]
        progs, span = L.reduction_programs(K, bk)
        grid = (L.cdiv(R, br), progs)
        part = new_output((progs, R), torch.float32, x.device)
    bias_act_bwd_kernel[grid](dy, x, bias.float().contiguous(), dx, part, R, K, c, span, ACT=a.code,
                              CL=cl, BLOCK_R=br, BLOCK_K=bk, num_warps=L.EW_WARPS)
    record("bias_act_bwd")
    dbias = part.sum(0) if cl else part.sum(0).view(n, c).sum(0)
    return dx, dbias


@bias_act_bwd.register_fake
def _(dy, x, bias, act):
    dx = torch.empty_like(x, memory_format=_fmt(channels_last(x)))
    return dx, x.new_empty((x.shape[1],), dtype=torch.float32)


register_bias_act_autograd(bias_act_fwd, bias_act_bwd)


@dispatch.register("bias_act", "triton")
def bias_act(x: torch.Tensor, bias: torch.Tensor, act: str = "gelu") -> torch.Tensor:
    """Same contract as the reference: act(x + bias[None, :, None, None]) in
    x's dtype and memory format, differentiable in x and bias."""
    check_bias_act("bias_act", x, bias, act)
    return bias_act_fwd(x, bias, act)


# The roofline's FLOP/byte formulas of these ops (kernels/bias_act_costs.py), also for FlopCounterMode:
# registered after the definitions, because torch attaches formulas to existing ops only.
register_flop_formulas(COSTS)
