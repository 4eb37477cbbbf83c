"""Autograd for the model-level Triton ops: batch norm + activation, and the
fused conv group (forward and backward as explicit chains of the kernels in
:mod:`dawnbench_fast.kernels.custom_ops`; batch-norm statistics and running
stats handled here, so the kernels stay functional).
"""

from __future__ import annotations

import torch

from dawnbench_fast.kernels.custom_ops import (
    affine_act,
    bn_act_bwd_apply,
    bn_act_bwd_reduce,
    bn_finalize,
    channel_stats,
    conv3x3_fwd,
    conv3x3_pool_fwd,
    conv3x3_wgrad,
    deterministic_stats,
)


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
