"""The PyTorch references of the layer ops ``linear``, ``bn_act``,
``conv_group`` and ``bias_act`` (backend ``torch`` of dispatch.CATALOGUE; the
specification the other backends are tested against), and the argument
checks every face of ``bias_act`` shares (:func:`check_bias_act`).

Why here and not in models/: the op modules of kernels/ and csrc/ start from
their reference, and kernels never import the model. This module imports only
torch and the vocabulary; models/layers.py re-exports these functions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dawnbench_fast.vocabulary import Activation, activation

# The dtypes our kernels store (their math is fp32).
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T without bias (the CIFAR head)."""
    return F.linear(x, weight)


def bn_act(x: torch.Tensor, bn: torch.nn.BatchNorm2d, act: str = "gelu") -> torch.Tensor:
    """Batch norm (training or eval per ``bn.training``) followed by ``act``."""
    return activation(act).fn(bn(x))


def conv_group(group: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Reference forward of a models.layers.ConvGroup, built on the ``bn_act`` op
    that the group's backend chose (``group.bn_act``, default reference)."""
    bn_act_fn = getattr(group, "bn_act", bn_act)
    x = group.pool(group.conv1(x))
    x = bn_act_fn(x, group.norm1, group.act)
    x = group.conv2(x)
    return bn_act_fn(x, group.norm2, group.act)


def check_bias_act(op: str, x: torch.Tensor, bias: torch.Tensor, act: str) -> Activation:
    """The checks every face of ``bias_act`` makes, each a one-line error
    (the kernels read raw pointers: a wrong size would misread memory);
    returns the activation."""
    a = activation(act)
    if x.dim() != 4:
        raise ValueError(f"{op}: x must be (N, C, H, W), got shape {tuple(x.shape)}")
    if x.dtype not in KERNEL_DTYPES:
        raise TypeError(f"{op}: x must be float32, bfloat16 or float16, got {x.dtype}")
    if bias.dim() != 1 or bias.shape[0] != x.shape[1]:
        raise ValueError(f"{op}: bias must be ({x.shape[1]},), one value per channel of x, "
                         f"got shape {tuple(bias.shape)}")
    if bias.device != x.device:
        raise ValueError(f"{op}: bias is on {bias.device} but x is on {x.device}")
    return a


def register_bias_act_autograd(forward, backward) -> None:
    """The autograd of a face of ``bias_act``, the same for every face: its
    custom op ``forward(x, bias, act)`` saves x and bias, and its ``backward(dy,
    x, bias, act) -> (dx, fp32 dbias)`` gives the gradients (dbias in the
    bias's dtype)."""
    def setup(ctx, inputs, output) -> None:
        x, bias, act = inputs
        ctx.save_for_backward(x, bias)
        ctx.act = act

    def grad(ctx, dy):
        x, bias = ctx.saved_tensors
        dx, dbias = backward(dy, x, bias, ctx.act)
        return dx, dbias.to(bias.dtype), None

    forward.register_autograd(grad, setup_context=setup)


def bias_act(x: torch.Tensor, bias: torch.Tensor, act: str = "gelu") -> torch.Tensor:
    """act(x + bias[None, :, None, None]) computed in fp32 and rounded once to
    x's dtype, in x's memory format (channels_last stays channels_last)."""
    a = check_bias_act("bias_act", x, bias, act)
    return a.fn(x.float() + bias.float().view(1, -1, 1, 1)).to(x.dtype)
