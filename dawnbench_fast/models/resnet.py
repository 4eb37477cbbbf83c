"""ResNet-50 v1.5 and ResNet-18 for the ImageNet recipe, written here (no
torchvision), with the two options fast ImageNet recipes add.

- **v1.5**: in a bottleneck that downsamples, the stride sits on the 3x3
  convolution, not on the first 1x1 (v1, He et al. 2015) -- the variant
  torchvision, FFCV and the DAWNBench ResNet-50 entries train. With 1000
  classes ResNet-50 has 25,557,032 parameters and ResNet-18 11,689,512, as
  torchvision's (tests/imagenet/test_resnet.py checks both).
- **zero-init residual** (``zero_init_residual``): the last BatchNorm of each
  residual branch starts with gamma = 0, so every block starts as the
  identity (Goyal et al. 2017, "Accurate, Large Minibatch SGD").
- **BlurPool** (``blurpool``): anti-aliased downsampling (Zhang 2019), as
  FFCV's ImageNet example applies it: every strided convolution with at
  least 16 input channels first blurs its input with the 3x3 binomial
  filter [1, 2, 1] x [1, 2, 1] / 16 (depthwise, stride 1), then convolves
  with its stride. The filter is a buffer: the parameter count is unchanged.

``width`` (64 for the published nets) scales every stage, so tests build
tiny ones; ``num_classes`` sizes the head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# Blocks per stage of the published nets.
LAYOUTS: dict[str, tuple[str, tuple[int, ...]]] = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet101": ("bottleneck", (3, 4, 23, 3)),
}
ARCHS = tuple(LAYOUTS)


class BlurPoolConv2d(nn.Module):
    """A strided convolution that sees its input blurred first (anti-aliasing).

    ``self.conv`` is the wrapped convolution, unchanged; the blur is a fixed
    depthwise 3x3 binomial filter, a buffer (it moves with ``.to`` and is in
    the state dict, but it is not a parameter)."""

    def __init__(self, conv: nn.Conv2d):
        super().__init__()
        self.conv = conv
        taps = torch.tensor([1.0, 2.0, 1.0])
        kernel = (taps[:, None] * taps[None, :]) / 16.0
        self.register_buffer("blur_filter", kernel.expand(conv.in_channels, 1, 3, 3).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        blurred = F.conv2d(x, self.blur_filter.to(x.dtype), stride=1, padding=1, groups=self.conv.in_channels)
        return self.conv(blurred)


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class StridedConv1x1(nn.Conv2d):
    """A strided 1x1 convolution (a downsample shortcut), computed on the CPU
    as the unit-stride one on every ``stride``-th pixel: the same numbers.

    Why: oneDNN's 1x1 weight gradient in channels_last with fewer input
    channels than its channel block writes past its workspace (heap
    corruption, then a crash; uxlfoundation/oneDNN#6035; seen here with torch
    2.13 at 8 channels). The slice is the copy oneDNN's own strided path makes.
    Parameters and state-dict keys are nn.Conv2d's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            return super().forward(x)
        sh, sw = self.stride
        return F.conv2d(x[:, :, ::sh, ::sw], self.weight, self.bias)


def conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    if stride > 1:
        return StridedConv1x1(cin, cout, 1, stride=stride, bias=False)
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions (ResNet-18/34); the first carries the stride."""

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(cin, planes, stride), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = conv3x3(planes, planes), nn.BatchNorm2d(planes)
        self.downsample = downsample

    def last_bn(self) -> nn.BatchNorm2d:
        return self.bn2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        return F.relu(self.bn2(self.conv2(out)) + identity, inplace=True)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3, 1x1 expand (x4); v1.5: the stride is on the 3x3."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1, self.bn1 = conv1x1(cin, planes), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = conv3x3(planes, planes, stride), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = conv1x1(planes, planes * 4), nn.BatchNorm2d(planes * 4)
        self.downsample = downsample

    def last_bn(self) -> nn.BatchNorm2d:
        return self.bn3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = F.relu(self.bn2(self.conv2(out)), inplace=True)
        return F.relu(self.bn3(self.conv3(out)) + identity, inplace=True)


class ResNet(nn.Module):
    """Stem (7x7/2 conv, BN, ReLU, 3x3/2 max-pool), four stages of blocks
    (the first block of stages 2-4 halves the resolution), global average
    pool, a linear head with bias. Takes any input side (progressive resizing)."""

    def __init__(self, arch: str = "resnet50", num_classes: int = 1000, width: int = 64, *,
                 zero_init_residual: bool = False, blurpool: bool = False):
        super().__init__()
        if arch not in LAYOUTS:
            raise ValueError(f"arch {arch!r}: one of {', '.join(ARCHS)}")
        kind, blocks = LAYOUTS[arch]
        block = Bottleneck if kind == "bottleneck" else BasicBlock
        self.arch = arch
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        cin, stages = width, []
        for i, n in enumerate(blocks):
            planes, stride = width * 2**i, 1 if i == 0 else 2
            layer = []
            for k in range(n):
                s = stride if k == 0 else 1
                down = None
                if s != 1 or cin != planes * block.expansion:
                    down = nn.Sequential(conv1x1(cin, planes * block.expansion, s),
                                         nn.BatchNorm2d(planes * block.expansion))
                layer.append(block(cin, planes, s, down))
                cin = planes * block.expansion
            stages.append(nn.Sequential(*layer))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(cin, num_classes)
        self._init_weights(zero_init_residual)
        if blurpool:
            apply_blurpool(self)

    def _init_weights(self, zero_init_residual: bool) -> None:
        """He (fan-out) init of the convolutions, BN at gamma 1, beta 0 (the
        last of each residual branch at gamma 0 with ``zero_init_residual``);
        the head keeps nn.Linear's default init."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, BasicBlock | Bottleneck):
                    nn.init.zeros_(m.last_bn().weight)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x)), inplace=True))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def apply_blurpool(module: nn.Module) -> nn.Module:
    """Wrap every strided convolution of ``module`` with at least 16 input
    channels in a :class:`BlurPoolConv2d` (FFCV's rule: the RGB stem keeps
    its plain strided conv), in place; returns ``module``."""
    for name, child in module.named_children():
        if isinstance(child, nn.Conv2d) and max(child.stride) > 1 and child.in_channels >= 16:
            setattr(module, name, BlurPoolConv2d(child))
        elif not isinstance(child, BlurPoolConv2d):
            apply_blurpool(child)
    return module


def resnet50(**kwargs) -> ResNet:
    return ResNet("resnet50", **kwargs)


def resnet18(**kwargs) -> ResNet:
    return ResNet("resnet18", **kwargs)
