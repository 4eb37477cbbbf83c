"""The ``conv_group`` op on Triton: conv3x3 -> 2x2 max-pool -> BN -> act ->
conv3x3 -> BN -> act, forward and backward. Start here: this module holds the
op's custom ops (the fused conv and its weight gradient), autograd and
dispatch registration, and imports its kernels and references.

Faces of the op:
- reference: :func:`dawnbench_fast.layer_ops.conv_group` (backend ``torch``);
  kernel-level references :func:`conv3x3_reference`, :func:`conv3x3_wgrad_reference`;
- Triton (this module): forward = conv3x3 (+pool +BN statistics, fused;
  :mod:`.conv_group_conv3x3`) -> finalize -> BN+act -> conv3x3 (+statistics;
  or with the BN+act as its prologue: ``FUSED_PROLOGUE``) -> finalize ->
  BN+act (the ops of :mod:`.bn_act`). Backward,
  all ours: BN+act backward with the pool scatter, the convs' data gradients
  (the forward kernel on flipped filters) and weight gradients (split-K
  implicit GEMM on the stored input, or recomputing the prologue;
  :mod:`.conv_group_wgrad`).
  ``TRITON_DGRAD``/``TRITON_WGRAD`` = False switch those two GEMMs to
  ``aten.convolution_backward`` (cuDNN on a GPU);
- CUDA C++: none (the ``cuda`` backend serves the reference);
- CPU: csrc/conv_group.py (oneDNN convolutions with our weight gradient,
  csrc/conv_group_wgrad.py, and the fused pool + BN + act), registered for
  ``--kernels cpu``.
Tests: tests/ops/test_conv_group.py. Costs: kernels/conv_group_costs.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from dawnbench_fast import dispatch
from dawnbench_fast.kernels import bn_act
from dawnbench_fast.kernels import launches as L
from dawnbench_fast.kernels.activations import act_code
from dawnbench_fast.kernels.bn_act import bn_training, empty_f32, finalize
from dawnbench_fast.kernels.conv_group_conv3x3 import conv3x3_fwd_kernel, conv3x3_reference
from dawnbench_fast.kernels.conv_group_costs import COSTS
from dawnbench_fast.kernels.conv_group_wgrad import conv3x3_wgrad_kernel, conv3x3_wgrad_reference
from dawnbench_fast.kernels.launches import interpreting, needs_f32_math, new_output, record
from dawnbench_fast.layer_ops import conv_group as reference
from dawnbench_fast.op_path import plain_eager
from dawnbench_fast.roofline.registry import register_flop_formulas

__all__ = ["conv3x3_fwd", "conv3x3_pool_fwd", "conv3x3_reference", "conv3x3_wgrad",
           "conv3x3_wgrad_reference", "conv_blocks", "conv_group", "reference", "wgrad_blocks", "wmat"]

# The interpreter runs fewer, larger programs faster; tests lower these to
# exercise tile edges.
INTERPRETER_CONV_BLOCK_M = 512
INTERPRETER_WGRAD_BLOCK_K = 512
INTERPRETER_WGRAD_SPLITS = 1  # tests raise it to exercise the atomic split-K path

# Data and weight gradients of the convs on our kernels (True) or in
# aten.convolution_backward (cuDNN on a GPU; False).
TRITON_DGRAD = True
TRITON_WGRAD = True

# The second conv's input act(bn(y1)): computed once by affine_act and kept
# for the backward (False), or recomputed as each tile is loaded by the conv
# and its weight gradient (True: one pass less over memory, but every input
# element's activation is evaluated nine times, once per tap). On an H100
# (docs/results/gpu-h100-2026-11-26b) the recomputing prologue made the
# forward kernel 2.3-3.3x and the weight gradient 2.5x slower than without it
# at the same shape, far more than the pass it saves.
FUSED_PROLOGUE = False


def channel_tile(channels: int, cap: int) -> int:
    """A tile over ``channels``: their power of two, at least 16 (tl.dot's
    least), at most ``cap`` (a tile wider than the channels is waste)."""
    return min(cap, max(16, L.next_power_of_2(channels)))


def conv_blocks(cin: int, cout: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) for the fused conv.
    tl.dot needs tiles of at least 16; BLOCK_M is a multiple of 4 (whole
    pooling windows). The tiles are the H100 sweep's winners at the recipe's
    calls without spills (tools/gpu_suite/sweep_conv_group.py,
    docs/results/gpu-h100-2026-11-26b): 128x128x64 with 8 warps, except for
    the 24-channel input of the first group, where 64-row tiles with 4 warps
    took 0.93 ms against 1.26. Neither the GPU's triton 3.6 nor triton 3.9
    spills them as a launch compiles them (docs/PERFORMANCE.md, "Compiled
    resources")."""
    bn = channel_tile(cout, 128)
    bk = channel_tile(cin, 64)
    if interpreting():
        return INTERPRETER_CONV_BLOCK_M, bn, bk, 8, 3
    return (64, bn, bk, 4, 3) if cin < 32 else (128, bn, bk, 8, 3)


def _conv3x3_launch(x, wmat, scale, shift, act, pool, stats, deterministic):
    """Launch the fused conv; shared by the pooled and unpooled custom ops."""
    N, H, W, Cin = x.shape
    Cout = wmat.shape[1]
    x = x.contiguous()
    OH, OW = (H // 2, W // 2) if pool else (H, W)
    y = new_output((N, OH, OW, Cout), x.dtype, x.device)
    idx = new_output((N, OH, OW, Cout) if pool else (0,), torch.int8, x.device)
    bm, bn, bk, warps, stages = conv_blocks(Cin, Cout)
    rows = N * OH * OW * (4 if pool else 1)
    grid = (L.cdiv(rows, bm), L.cdiv(Cout, bn))
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
        DOT_PRECISION=L.dot_precision(x.dtype, conv=True),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps,
        num_stages=1 if interpreting() else stages)
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


def _conv3x3_fwd(x: torch.Tensor, wmat: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor,
                act: str, stats: bool,
                deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused conv3x3 over NHWC ``x`` [N, H, W, Cin] with ``wmat`` [9*Cin, Cout]
    (tap-major). Non-empty ``scale``/``shift`` enable the act(x*scale+shift)
    prologue. Returns (y [N, H, W, Cout], empty, partial sum, partial sum of
    squares ([P, Cout] fp32; empty without stats))."""
    return _conv3x3_launch(x, wmat, scale, shift, act, False, stats, deterministic)


conv3x3_fwd = torch.library.custom_op("dawnbench::conv3x3_fwd", _conv3x3_fwd, mutates_args=())


@conv3x3_fwd.register_fake
def _(x, wmat, scale, shift, act, stats, deterministic):
    return _conv3x3_fake(x, wmat, False, stats)


def _conv3x3_pool_fwd(x: torch.Tensor, wmat: torch.Tensor, scale: torch.Tensor,
                     shift: torch.Tensor, act: str, stats: bool, deterministic: bool
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """As conv3x3_fwd followed by a floor-mode 2x2 max-pool in the epilogue:
    y is [N, H//2, W//2, Cout], with the window argmax (0..3, int8) and the
    statistics of the pooled output."""
    return _conv3x3_launch(x, wmat, scale, shift, act, True, stats, deterministic)


conv3x3_pool_fwd = torch.library.custom_op("dawnbench::conv3x3_pool_fwd", _conv3x3_pool_fwd, mutates_args=())


@conv3x3_pool_fwd.register_fake
def _(x, wmat, scale, shift, act, stats, deterministic):
    return _conv3x3_fake(x, wmat, True, stats)


def wgrad_blocks(cin: int, cout: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_M over the 9*Cin rows, BLOCK_N over Cout, BLOCK_K over pixels,
    num_warps, num_stages): the H100 sweep's winners without spills
    (docs/results/gpu-h100-2026-11-26b/call2): 64x64x32 with 4 warps and 4
    stages for the 24-channel input; 128x128x64 with 8 warps for 256 output
    channels (0.358 / 0.300 ms against 0.397 / 0.346 with 64 rows at 64->256
    @15 px and 256->256 @7 px; 0.110 against 0.086 at @3 px, a smaller call);
    else 64x128x64 with 8 warps."""
    if interpreting():
        return channel_tile(9 * cin, 64), channel_tile(cout, 64), INTERPRETER_WGRAD_BLOCK_K, 8, 3
    if cin < 32:
        return channel_tile(9 * cin, 64), channel_tile(cout, 64), 32, 4, 4
    rows = 128 if cout >= 256 else 64
    return channel_tile(9 * cin, rows), channel_tile(cout, 128), 64, 8, 3


def _wgrad_splits(pixels: int, tiles: int, bk: int, deterministic: bool) -> int:
    """split-K: enough programs to fill a GPU; one split (plain stores) when
    deterministic or interpreting (unless a test asks for more)."""
    if deterministic:
        return 1
    if interpreting():
        return INTERPRETER_WGRAD_SPLITS
    return max(1, min(L.cdiv(pixels, 8 * bk), L.cdiv(1056, tiles)))


def _conv3x3_wgrad(x: torch.Tensor, dy: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor,
                  act: str, deterministic: bool) -> torch.Tensor:
    """Weight gradient [9*Cin, Cout] (fp32, tap-major like the forward's B
    operand) of a 3x3 'same' conv with NHWC input ``x`` [N, H, W, Cin] and
    output gradient ``dy`` [N, H, W, Cout]; non-empty ``scale``/``shift``
    recompute the input as act(x*scale + shift) while loading it."""
    N, H, W, Cin = x.shape
    Cout = dy.shape[-1]
    x, dy = x.contiguous(), dy.contiguous().to(x.dtype)
    bm, bn, bk, warps, stages = wgrad_blocks(Cin, Cout)
    pixels = N * H * W
    splits = _wgrad_splits(pixels, L.cdiv(9 * Cin, bm) * L.cdiv(Cout, bn), bk, deterministic)
    per = L.cdiv(L.cdiv(pixels, splits), bk) * bk
    splits = L.cdiv(pixels, per)
    dw = (torch.zeros((9 * Cin, Cout), device=x.device, dtype=torch.float32) if splits > 1
          else new_output((9 * Cin, Cout), torch.float32, x.device))
    prologue = scale.numel() > 0
    grid = (L.cdiv(9 * Cin, bm), L.cdiv(Cout, bn), splits)
    conv3x3_wgrad_kernel[grid](
        x, dy, scale if prologue else dw, shift if prologue else dw, dw, N, H, W, Cin, Cout, per,
        PROLOGUE=prologue, ACT=act_code(act), ATOMIC=splits > 1,
        F32_MATH=needs_f32_math(x.dtype), DOT_PRECISION=L.dot_precision(x.dtype, conv=True),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps,
        num_stages=1 if interpreting() else stages)
    record("conv3x3_wgrad")
    return dw


conv3x3_wgrad = torch.library.custom_op("dawnbench::conv3x3_wgrad", _conv3x3_wgrad, mutates_args=())


@conv3x3_wgrad.register_fake
def _(x, dy, scale, shift, act, deterministic):
    return x.new_empty((9 * x.shape[-1], dy.shape[-1]), dtype=torch.float32)


# -- the two paths to the same launches (dawnbench_fast/op_path.py) ---------
PLAIN = SimpleNamespace(**vars(bn_act.PLAIN), conv3x3_fwd=_conv3x3_fwd, conv3x3_pool_fwd=_conv3x3_pool_fwd,
                        conv3x3_wgrad=_conv3x3_wgrad)
CUSTOM = SimpleNamespace(**vars(bn_act.CUSTOM), conv3x3_fwd=conv3x3_fwd, conv3x3_pool_fwd=conv3x3_pool_fwd,
                         conv3x3_wgrad=conv3x3_wgrad)


def launchers() -> SimpleNamespace:
    """This call's launch functions (bn_act's and the convs'): the plain ones
    in eager mode with nobody looking, else the custom ops."""
    return PLAIN if plain_eager() else CUSTOM


# -- autograd ----------------------------------------------------------------
def wmat(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[Cout, Cin, 3, 3] -> [9*Cin, Cout], tap-major, the conv kernel's B operand
    (one copy that also casts: an eager call pays a launch per copy)."""
    cout, cin = w.shape[:2]
    out = torch.empty((9 * cin, cout), dtype=dtype, device=w.device)
    out.view(3, 3, cin, cout).copy_(w.permute(2, 3, 1, 0))
    return out


def _wmat_dgrad(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The data gradient of a 3x3 'same' conv is a 3x3 'same' conv of the
    output gradient with the filters flipped and in/out channels swapped."""
    return wmat(w.flip(2, 3).transpose(0, 1), dtype)


def _conv_backward(dy, x, w, need_input, scale, shift, act, k):
    """(data gradient in NHWC or None, weight gradient [Cout, Cin, 3, 3]) of a
    3x3 'same' conv whose input was ``x`` (NHWC), or act(x*scale + shift)
    when ``scale`` is non-empty. Ours: data gradient = the forward kernel on
    flipped filters; weight gradient = conv3x3_wgrad with the prologue
    recomputed on load. Fallback: aten.convolution_backward (cuDNN)."""
    e = empty_f32(dy.device)
    dx = dw = None
    if need_input and TRITON_DGRAD:
        dx = k.conv3x3_fwd(dy, _wmat_dgrad(w, dy.dtype), e, e, "identity", False, False)[0]
    if TRITON_WGRAD:
        wm = k.conv3x3_wgrad(x, dy, scale, shift, act, L.deterministic_stats())
        dw = wm.view(3, 3, w.shape[1], w.shape[0]).permute(3, 2, 0, 1).contiguous()
    if (need_input and dx is None) or dw is None:
        if scale.numel() > 0:  # rematerialise the activated input for aten
            x = k.affine_act(x.view(-1, x.shape[-1]), scale, shift, act).view(x.shape)
        gx, gw, _ = torch.ops.aten.convolution_backward(
            dy.permute(0, 3, 1, 2), x.permute(0, 3, 1, 2), w.to(x.dtype), None, [1, 1], [1, 1],
            [1, 1], False, [0, 0], 1, [need_input and dx is None, dw is None, False])
        dx = L.nhwc(gx) if gx is not None else dx
        dw = gw if gw is not None else dw
    return dx, dw


class ConvGroupFn(torch.autograd.Function):
    """conv3x3 -> maxpool2 -> BN -> act -> conv3x3 -> BN -> act on NHWC input."""

    @staticmethod
    def forward(ctx, x, w1, w2, bw1, bb1, bw2, bb2, group, dtype):
        N, H, W, _ = x.shape
        det = L.deterministic_stats()
        act = group.act
        tr1, tr2 = bn_training(group.norm1), bn_training(group.norm2)
        e = empty_f32(x.device)
        k = launchers()
        y1, idx1, ps1, pq1 = k.conv3x3_pool_fwd(x, wmat(w1, dtype), e, e, act, tr1, det)
        _, PH, PW, C1 = y1.shape
        mean1, inv1, sc1, sh1 = finalize(ps1, pq1, N * PH * PW, group.norm1, tr1, k)
        if FUSED_PROLOGUE:
            a1 = y1.new_empty(0)
            z2, _, ps2, pq2 = k.conv3x3_fwd(y1, wmat(w2, dtype), sc1, sh1, act, tr2, det)
        else:
            a1 = k.affine_act(y1.view(-1, C1), sc1, sh1, act).view(y1.shape)
            z2, _, ps2, pq2 = k.conv3x3_fwd(a1, wmat(w2, dtype), e, e, act, tr2, det)
        C2 = z2.shape[-1]
        mean2, inv2, sc2, sh2 = finalize(ps2, pq2, N * PH * PW, group.norm2, tr2, k)
        out = k.affine_act(z2.view(-1, C2), sc2, sh2, act).view(z2.shape)
        ctx.save_for_backward(x, w1, w2, y1, idx1, z2, a1, mean1, inv1, sc1, sh1,
                              mean2, inv2, sc2, sh2)
        ctx.act, ctx.training = act, (tr1, tr2)
        return out

    @staticmethod
    def backward(ctx, dout):
        x, w1, w2, y1, idx1, z2, a1, mean1, inv1, sc1, sh1, mean2, inv2, sc2, sh2 = ctx.saved_tensors
        act = ctx.act
        N, PH, PW, C1 = y1.shape
        count = float(N * PH * PW)
        no_idx = torch.empty(0, device=x.device, dtype=torch.int8)
        k = launchers()
        # second BN + act
        C2 = z2.shape[-1]
        dout = dout.to(z2.dtype).contiguous()
        g, gx = k.bn_act_bwd_reduce(dout.view(-1, C2), z2.view(-1, C2), sc2, sh2, act)
        dbw2, dbb2, a2, b2 = k.bn_bwd_coefficients(g, gx, mean2, inv2, sc2, count, ctx.training[1])
        dz2 = k.bn_act_bwd_apply(dout, z2, sc2, sh2, a2, b2, no_idx, list(z2.shape), act)
        # second conv: its input act(bn(y1)), stored, or recomputed by the fused prologue
        e = empty_f32(x.device)
        if a1.numel():
            da1, dw2 = _conv_backward(dz2, a1, w2, True, e, e, act, k)
        else:
            da1, dw2 = _conv_backward(dz2, y1, w2, True, sc1, sh1, act, k)
        # first BN + act, scattered back through the max-pool
        g, gx = k.bn_act_bwd_reduce(da1.view(-1, C1), y1.view(-1, C1), sc1, sh1, act)
        dbw1, dbb1, a1c, b1c = k.bn_bwd_coefficients(g, gx, mean1, inv1, sc1, count, ctx.training[0])
        dz1 = k.bn_act_bwd_apply(da1, y1, sc1, sh1, a1c, b1c, idx1,
                               [N, x.shape[1], x.shape[2], C1], act)
        dx, dw1 = _conv_backward(dz1, x, w1, ctx.needs_input_grad[0], e, e, act, k)
        return (dx, dw1.to(w1.dtype), dw2.to(w2.dtype), dbw1, dbb1, dbw2, dbb2, None, None)


# -- the op ------------------------------------------------------------------
@dispatch.register("conv_group", "triton")
def conv_group(group: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Triton forward/backward of a models.layers.ConvGroup (see module doc)."""
    if x.shape[-1] < 2 or x.shape[-2] < 2:
        raise ValueError(f"conv_group: input {tuple(x.shape)} is too small for the 2x2 pool")
    dtype = L.compute_dtype(x)
    xh = L.nhwc(x).to(dtype)
    n1, n2 = group.norm1, group.norm2
    y = ConvGroupFn.apply(xh, group.conv1.weight, group.conv2.weight, n1.weight, n1.bias,
                          n2.weight, n2.bias, group, dtype)
    return y.permute(0, 3, 1, 2)


# The roofline's FLOP/byte formulas of these ops (kernels/conv_group_costs.py), also for FlopCounterMode:
# registered after the definitions, because torch attaches formulas to existing ops only.

register_flop_formulas(COSTS)
