"""InferenceConv2d (dawnbench_fast/models/inference_conv.py): oneDNN's
convolution on a weight reordered once computes F.conv2d's convolution
(both within the dtype's rounding of float64; their sums may run in another
order), on fresh random inputs at sizes off oneDNN's channel blocks, one
image and several, fp32 and bf16; a changed weight is reordered again; what
the reordered form does not cover is F.conv2d's, bit for bit; the folded
CIFAR net's convs take it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dawnbench_fast.models import inference_conv
from dawnbench_fast.models.inference_conv import InferenceConv2d

pytestmark = pytest.mark.skipif(not inference_conv.AVAILABLE, reason="needs torch's oneDNN (mkldnn) ops")

# against float64, relative to the largest output: fp32 sums of up to 2304 products; bf16's
# rounding of the output (2^-8) and of the sums' order
TOL = {torch.float32: 1e-5, torch.bfloat16: 2**-7}


def conv(cin: int, cout: int, dtype: torch.dtype, gen: torch.Generator) -> InferenceConv2d:
    m = InferenceConv2d(cin, cout, 3, padding=1, bias=True).requires_grad_(False)
    with torch.no_grad():
        m.weight.copy_(torch.randn(m.weight.shape, generator=gen) / (3 * cin**0.5))
        m.bias.copy_(torch.randn(cout, generator=gen))
    return m.to(dtype)


def reference(m: torch.nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, m.weight, m.bias, padding=1)


def within_rounding(got: torch.Tensor, m: torch.nn.Conv2d, x: torch.Tensor) -> bool:
    exact = F.conv2d(x.double(), m.weight.double(), m.bias.double(), padding=1)
    return (got.double() - exact).abs().max().item() <= TOL[got.dtype] * exact.abs().max().item()


def channels_last(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(1, 5, 20, 7, 7), (7, 24, 64, 9, 5), (3, 64, 256, 15, 15),
                                   (1, 256, 256, 3, 3)], ids=lambda s: "x".join(map(str, s)))
def test_the_reordered_weight_computes_f_conv2d_convolution(dtype, shape):
    n, cin, cout, h, w = shape
    gen = torch.Generator().manual_seed(sum(shape) * (2 if dtype == torch.bfloat16 else 1))
    m = conv(cin, cout, dtype, gen).to(memory_format=torch.channels_last)
    x = channels_last(torch.randn(n, cin, h, w, generator=gen).to(dtype))
    with torch.no_grad():
        assert m.packed_weight(x) is not None  # the reordered form runs here
        got, want = m(x), reference(m, x)
    assert got.dtype == dtype and got.shape == (n, cout, h, w)
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert within_rounding(got, m, x) and within_rounding(want, m, x)


def test_a_changed_weight_is_reordered_again():
    """An in-place copy (a refold), a new dtype and a new memory format each
    give a new reordered weight, never the stale one."""
    gen = torch.Generator().manual_seed(3)
    m = conv(16, 32, torch.float32, gen)
    x = channels_last(torch.randn(2, 16, 6, 6, generator=gen))
    with torch.no_grad():
        first = m(x)
        m.weight.copy_(torch.randn(m.weight.shape, generator=gen))
        m.bias.mul_(-1)
        assert within_rounding(m(x), m, x) and within_rounding(first, m, x) is False
        m.to(torch.bfloat16)
        xb = x.bfloat16()
        assert m(xb).dtype == torch.bfloat16 and within_rounding(m(xb), m, xb)
        m.to(memory_format=torch.channels_last)
        assert within_rounding(m(xb), m, xb)
        # another input size gets a weight reordered for it
        big = channels_last(torch.randn(3, 16, 11, 13, generator=gen).bfloat16())
        assert within_rounding(m(big), m, big)


def test_what_it_does_not_cover_is_f_conv2d():
    gen = torch.Generator().manual_seed(5)
    m = conv(8, 16, torch.float32, gen)
    x = channels_last(torch.randn(2, 8, 5, 5, generator=gen))
    # pytorch's default layout, or reorder turned off: F.conv2d
    assert m.packed_weight(x.contiguous()) is None
    with torch.no_grad():
        assert torch.equal(m(x.contiguous()), reference(m, x.contiguous()))
        m.reorder = False
        assert m.packed_weight(x) is None and torch.equal(m(x), reference(m, x))
        m.reorder = True
    # autocast to bf16 over fp32 weights: autocast's bf16 convolution, not an fp32 one
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        assert m.packed_weight(x) is None
        got, want = m(x), reference(m, x)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    # an input of another dtype than the weight: F.conv2d's error or cast, not a silent one
    assert m.packed_weight(x.double()) is None
    # autograd: the gradient flows as through F.conv2d
    m.requires_grad_(True)
    xg = x.clone().requires_grad_()
    assert m.packed_weight(xg) is None
    m(xg).sum().backward()
    xr = x.clone().requires_grad_()
    reference(m, xr).sum().backward()
    assert torch.equal(xg.grad, xr.grad)


def test_a_onednn_that_cannot_reorder_falls_back(monkeypatch):
    class Refusing:
        def _reorder_convolution_weight(self, *args):
            raise RuntimeError("no reorder here")

    monkeypatch.setattr(inference_conv, "_OPS", Refusing())
    gen = torch.Generator().manual_seed(7)
    m = conv(4, 16, torch.float32, gen)
    x = channels_last(torch.randn(1, 4, 6, 6, generator=gen))
    with torch.no_grad():
        assert torch.equal(m(x), reference(m, x))
        assert m.packed_weight(x) is None  # it does not try again at every call


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_the_folded_cifar_nets_convs_take_it(dtype):
    """Each folded conv of the evaluation's net runs on its reordered weight,
    and the logits are those of the same net on F.conv2d within the rounding."""
    from dawnbench_fast.models.cifar_net import CifarNet, FoldedCifarNet

    torch.manual_seed(11)
    model = CifarNet((16, 32, 32)).eval()
    model.init_whitening(torch.randn(64, 3, 32, 32), eps=5e-4)
    net = FoldedCifarNet(model, dtype).to(memory_format=torch.channels_last)
    plain = FoldedCifarNet(model, dtype).to(memory_format=torch.channels_last)
    for c in plain.convs:
        c.reorder = False
    x = channels_last(torch.randn(5, 3, 32, 32))
    with torch.no_grad(), torch.autocast("cpu", dtype, enabled=dtype != torch.float32):
        got, want = net(x), plain(x)
    assert all(isinstance(c, InferenceConv2d) and c._packed is not None for c in net.convs)
    assert all(c._packed is None for c in plain.convs)
    scale = want.abs().max().item()
    assert (got.float() - want.float()).abs().max().item() <= 8 * TOL[dtype] * scale
