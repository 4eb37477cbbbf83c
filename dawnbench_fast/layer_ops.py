"""The PyTorch references of the layer ops ``linear``, ``bn_act`` and
``conv_group`` (backend ``torch`` of dispatch.CATALOGUE; the specification the
other backends are tested against).

Why here and not in models/: the op modules of kernels/ and csrc/ start from
their reference, and kernels never import the model. This module imports only
torch and the vocabulary; models/layers.py re-exports these functions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dawnbench_fast.vocabulary import activation


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
