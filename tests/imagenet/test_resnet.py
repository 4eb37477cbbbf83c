"""The ImageNet ResNets (dawnbench_fast.models.resnet): the published
parameter counts, v1.5's stride on the 3x3, zero-init residual, BlurPool, and
tiny ones for the smoke tests."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dawnbench_fast.models.resnet import BlurPoolConv2d, Bottleneck, ResNet, StridedConv1x1

# torchvision's resnet50() / resnet18() with 1000 classes (the figures the papers and model cards quote)
PUBLISHED_PARAMETERS = {"resnet50": 25_557_032, "resnet18": 11_689_512}


def n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("arch", sorted(PUBLISHED_PARAMETERS))
@pytest.mark.parametrize("blurpool", [False, True])
def test_parameter_counts_are_the_published_ones(arch, blurpool):
    # BlurPool's filter is a buffer: it adds no parameter
    assert n_params(ResNet(arch, blurpool=blurpool)) == PUBLISHED_PARAMETERS[arch]


def test_v1_5_puts_the_stride_on_the_3x3():
    net = ResNet("resnet50", width=8, num_classes=10)
    for stage, stride in ((net.layer1, 1), (net.layer2, 2), (net.layer3, 2), (net.layer4, 2)):
        first = stage[0]
        assert isinstance(first, Bottleneck)
        assert first.conv1.stride == (1, 1) and first.conv1.kernel_size == (1, 1)
        assert first.conv2.stride == (stride, stride) and first.conv2.kernel_size == (3, 3)
        assert first.conv3.stride == (1, 1)
        assert first.downsample[0].stride == (stride, stride)
        assert all(b.conv2.stride == (1, 1) for b in stage[1:])


@pytest.mark.parametrize("arch", ["resnet18", "resnet50"])
@pytest.mark.parametrize("side", [64, 72])
def test_tiny_nets_take_any_side_and_channels_last(arch, side):
    # width 16 and an even batch: torch's CPU weight gradient of a strided 1x1 conv in
    # channels_last crashes the process (segfault, abort) with few channels (4 -> 8, 8 -> 16:
    # torch 2.13 on 2 threads for odd batches, torch 2.11 on 16 threads for even ones too)
    net = ResNet(arch, num_classes=7, width=16, blurpool=True).to(memory_format=torch.channels_last)
    x = torch.randn(4, 3, side, side).to(memory_format=torch.channels_last)
    out = net(x)
    assert out.shape == (4, 7) and torch.isfinite(out).all()
    out.sum().backward()
    assert all(p.grad is not None for p in net.parameters())


def test_zero_init_residual_makes_each_block_start_as_identity_plus_relu():
    net = ResNet("resnet50", width=4, num_classes=3, zero_init_residual=True)
    lasts = [b.bn3.weight for s in (net.layer1, net.layer2, net.layer3, net.layer4) for b in s]
    assert len(lasts) == 16 and all((w == 0).all() for w in lasts)
    assert all((b.bn1.weight == 1).all() for b in net.layer1)
    plain = ResNet("resnet50", width=4, num_classes=3)
    assert all((b.bn3.weight == 1).all() for b in plain.layer1)
    block = net.layer1[1].eval()  # no downsample: relu(0 + x) = x for x >= 0
    x = torch.rand(2, 16, 5, 5)
    torch.testing.assert_close(block(x), x)


def test_blurpool_wraps_strided_convs_with_16_or_more_inputs_only():
    net = ResNet("resnet18", width=16, num_classes=3, blurpool=True)
    wrapped = [m.conv for m in net.modules() if isinstance(m, BlurPoolConv2d)]
    strided = [m for m in net.modules() if isinstance(m, nn.Conv2d) and m.stride != (1, 1)]
    assert not isinstance(net.conv1, BlurPoolConv2d)  # the RGB stem: 3 inputs
    assert len(wrapped) == 6 and set(map(id, wrapped)) == {id(m) for m in strided if m.in_channels >= 16}


def test_blurpool_blurs_then_strides():
    conv = nn.Conv2d(16, 4, 3, stride=2, padding=1, bias=False)
    blur = BlurPoolConv2d(conv)
    flat = torch.ones(1, 16, 8, 8)  # interior of a constant image: the blur keeps it
    assert torch.allclose(blur(flat)[..., 1:-1, 1:-1], conv(flat)[..., 1:-1, 1:-1])
    x = torch.randn(1, 16, 9, 9)
    taps = torch.tensor([1.0, 2.0, 1.0])
    k = (taps[:, None] * taps[None, :] / 16).expand(16, 1, 3, 3)
    expected = conv(torch.nn.functional.conv2d(x, k, padding=1, groups=16))
    torch.testing.assert_close(blur(x), expected)
    assert blur(x).shape == conv(x).shape == (1, 4, 5, 5)
    assert "blur_filter" in dict(blur.named_buffers()) and n_params(blur) == n_params(conv)


def test_unknown_arch_is_one_line():
    with pytest.raises(ValueError, match="arch 'resnet9'"):
        ResNet("resnet9")


@pytest.mark.parametrize("cin, side, batch", [(8, 16, 47), (3, 15, 5), (24, 9, 6)])
def test_strided_1x1_equals_the_stock_strided_conv(cin, side, batch):
    # the stock conv in NCHW (where oneDNN's 1x1 weight gradient is sound) against ours in
    # channels_last at a shape that corrupts the heap through the stock path (8 channels, even side)
    torch.manual_seed(0)
    ours = StridedConv1x1(cin, 16, 1, stride=2, bias=False)
    stock = nn.Conv2d(cin, 16, 1, stride=2, bias=False)
    stock.weight.data.copy_(ours.weight.data)
    x = torch.randn(batch, cin, side, side)
    xl = x.contiguous(memory_format=torch.channels_last).requires_grad_()
    xs = x.clone().requires_grad_()
    g = torch.randn(batch, 16, (side + 1) // 2, (side + 1) // 2)
    out, ref = ours(xl), stock(xs)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    out.backward(g)
    ref.backward(g)
    torch.testing.assert_close(xl.grad, xs.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.weight.grad, stock.weight.grad, rtol=1e-4, atol=1e-4)
    assert list(dict(ours.named_parameters())) == ["weight"]
