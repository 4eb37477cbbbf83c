"""Layers of the CIFAR net. The ops they run (``linear``, ``bn_act``,
``conv_group``) have their PyTorch references in dawnbench_fast.layer_ops,
re-exported here; other backends (Triton, CUDA, CPU) register their own
implementations of the same op names with the same signatures, and the model
looks them up once through :mod:`dawnbench_fast.dispatch` when
:meth:`CifarNet.set_kernels` is called.
"""

from __future__ import annotations

import torch
from torch import nn

from dawnbench_fast.layer_ops import bn_act, conv_group, linear

__all__ = ["BatchNorm", "Conv", "ConvGroup", "bn_act", "conv_group", "linear"]


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
