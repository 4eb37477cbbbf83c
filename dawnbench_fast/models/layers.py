"""Reference (plain PyTorch) layers of the CIFAR net: the ``torch``
implementations of the ops ``linear``, ``bn_act`` and ``conv_group``
(named by dawnbench_fast.dispatch.CATALOGUE).

Other backends (Triton, CUDA, CPU) register their own implementations of the
same op names with the same signatures; the model looks them up once through
:mod:`dawnbench_fast.dispatch` when :meth:`CifarNet.set_kernels` is called.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dawnbench_fast.vocabulary import activation


class BatchNorm(nn.BatchNorm2d):
    """BatchNorm with a frozen unit weight and a trained bias (airbench style).

    ``momentum`` follows PyTorch's convention (weight of the new batch
    statistic); the recipe's 0.6 "keep" momentum is PyTorch's 0.4. Statistics
    and parameters stay fp32 even under autocast.
    """

    def __init__(self, num_features: int, momentum: float = 0.4, eps: float = 1e-12):
        super().__init__(num_features, eps=eps, momentum=momentum)
        self.weight.requires_grad_(False)


class Conv(nn.Conv2d):
    """3x3 'same' convolution without bias, dirac-initialised on its first
    ``in_channels`` filters so that each group starts close to identity."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__(in_channels, out_channels, kernel_size=3, padding="same", bias=False)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        w = self.weight.data
        torch.nn.init.dirac_(w[: w.size(1)])


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T without bias (the CIFAR head)."""
    return F.linear(x, weight)


def bn_act(x: torch.Tensor, bn: BatchNorm, act: str = "gelu") -> torch.Tensor:
    """Batch norm (training or eval per ``bn.training``) followed by ``act``."""
    return activation(act).fn(bn(x))


class ConvGroup(nn.Module):
    """conv3x3 -> maxpool2 -> BN -> act -> conv3x3 -> BN -> act."""

    def __init__(self, in_channels: int, out_channels: int, act: str = "gelu"):
        super().__init__()
        self.conv1 = Conv(in_channels, out_channels)
        self.pool = nn.MaxPool2d(2)
        self.norm1 = BatchNorm(out_channels)
        self.conv2 = Conv(out_channels, out_channels)
        self.norm2 = BatchNorm(out_channels)
        self.act = act
        self.impl = conv_group  # replaced by CifarNet.set_kernels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.impl(self, x)


def conv_group(group: ConvGroup, x: torch.Tensor) -> torch.Tensor:
    """Reference forward of a :class:`ConvGroup`, built on the ``bn_act`` op
    that the group's backend chose (``group.bn_act``, default reference)."""
    bn_act_fn = getattr(group, "bn_act", bn_act)
    x = group.pool(group.conv1(x))
    x = bn_act_fn(x, group.norm1, group.act)
    x = group.conv2(x)
    return bn_act_fn(x, group.norm2, group.act)
