"""InferenceConv2d (dawnbench_fast/models/inference_conv.py): oneDNN's
convolution on a weight reordered once computes F.conv2d's convolution
(both within the dtype's rounding of float64; their sums may run in another
order), on fresh random inputs at sizes off oneDNN's channel blocks, one
image and several, fp32 and bf16; each activation fused in as oneDNN's
post-op computes the activation of that convolution; a changed weight is
reordered again; what the reordered form does not cover is F.conv2d's and
the activation's PyTorch form, bit for bit; the folded CIFAR net's convs
take it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dawnbench_fast.models import inference_conv
from dawnbench_fast.models.inference_conv import POST_OPS, InferenceConv2d
from dawnbench_fast.vocabulary import MODEL_ACTIVATIONS, activation

pytestmark = pytest.mark.skipif(not inference_conv.AVAILABLE, reason="needs torch's oneDNN (mkldnn) ops")

# against float64, relative to the largest output: fp32 sums of up to 2304 products; bf16's
# rounding of the output (2^-8) and of the sums' order
TOL = {torch.float32: 1e-5, torch.bfloat16: 2**-7}


def conv(cin: int, cout: int, dtype: torch.dtype, gen: torch.Generator,
         act: str = "identity") -> InferenceConv2d:
    m = InferenceConv2d(cin, cout, 3, padding=1, bias=True, post_act=act).requires_grad_(False)
    with torch.no_grad():
        m.weight.copy_(torch.randn(m.weight.shape, generator=gen) / (3 * cin**0.5))
        m.bias.copy_(torch.randn(cout, generator=gen))
    return m.to(dtype)


def reference(m: InferenceConv2d, x: torch.Tensor) -> torch.Tensor:
    return activation(m.post_act).fn(F.conv2d(x, m.weight, m.bias, padding=1))


def within_rounding(got: torch.Tensor, m: InferenceConv2d, x: torch.Tensor) -> bool:
    exact = activation(m.post_act).fn(F.conv2d(x.double(), m.weight.double(), m.bias.double(), padding=1))
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("act", ["identity", *MODEL_ACTIVATIONS])
def test_the_fused_activation_is_the_activation_of_the_convolution(act, dtype):
    """oneDNN's post-op for each of the vocabulary's activations (the erf
    GELU, not its tanh form; SiLU as oneDNN's swish) against the activation
    of the float64 convolution, at one image's six views and at a batch, and
    reorder off: ATen's activation after F.conv2d, bit for bit."""
    gen = torch.Generator().manual_seed(len(act) * 31 + (1 if dtype == torch.bfloat16 else 0))
    m = conv(40, 72, dtype, gen, act).to(memory_format=torch.channels_last)
    for n, side in ((6, 7), (50, 13)):
        x = channels_last(torch.randn(n, 40, side, side, generator=gen).to(dtype))
        with torch.no_grad():
            assert m.packed_weight(x) is not None
            got = m(x)
            assert got.dtype == dtype and got.is_contiguous(memory_format=torch.channels_last)
            assert within_rounding(got, m, x), (act, dtype, n)
            m.reorder = False
            assert torch.equal(m(x), reference(m, x))
            m.reorder = True
    if act != "identity":  # the activation is applied, not skipped: its output differs from the bare conv's
        bare = F.conv2d(x, m.weight, m.bias, padding=1)
        assert (got.float() - bare.float()).abs().max().item() > 0.1


def test_an_fp32_input_under_autocast_is_cast_as_autocast_would():
    """The whitening conv's case: the image in fp32, the weight in bf16, the
    CPU's autocast computing in bf16: the input is rounded to bf16 and takes
    the reordered weight, the same bits as the bf16 input itself; with the
    weight in fp32 (autocast's own cast), F.conv2d's."""
    gen = torch.Generator().manual_seed(13)
    m = conv(3, 24, torch.bfloat16, gen, "gelu").to(memory_format=torch.channels_last)
    x = channels_last(torch.randn(6, 3, 9, 11, generator=gen))
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        cast = m.autocast_input(x)
        assert cast.dtype == torch.bfloat16 and m.packed_weight(cast) is not None
        got = m(x)
        assert got.dtype == torch.bfloat16 and torch.equal(got, m(x.bfloat16()))
        assert within_rounding(got, m, x.bfloat16())
        m32 = conv(3, 24, torch.float32, torch.Generator().manual_seed(13), "gelu")
        assert m32.autocast_input(x) is x and m32.packed_weight(x) is None
    assert m.autocast_input(x) is x  # no autocast: nothing cast (F.conv2d says what a mismatch is)


def test_every_model_activation_has_a_post_op_and_a_wrong_name_is_refused():
    assert set(POST_OPS) == {"identity", *MODEL_ACTIVATIONS}
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        InferenceConv2d(4, 4, 3, padding=1, post_act="swish")


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
    """Each folded conv of the evaluation's net, the whitening conv included,
    runs on its reordered weight with the activation after it fused in where
    no pool comes between, and the logits are those of the same net on
    F.conv2d and ATen's activations within the rounding."""
    from dawnbench_fast.models.cifar_net import CifarNet, FoldedCifarNet

    torch.manual_seed(11)
    model = CifarNet((16, 32, 32)).eval()
    model.init_whitening(torch.randn(64, 3, 32, 32), eps=5e-4)
    net = FoldedCifarNet(model, dtype).to(memory_format=torch.channels_last)
    plain = FoldedCifarNet(model, dtype).to(memory_format=torch.channels_last)
    for c in (plain.whiten, *plain.convs):
        c.reorder = False
    x = channels_last(torch.randn(5, 3, 32, 32))
    with torch.no_grad(), torch.autocast("cpu", dtype, enabled=dtype != torch.float32):
        got, want = net(x), plain(x)
    convs = (net.whiten, *net.convs)
    assert all(isinstance(c, InferenceConv2d) and c._packed is not None for c in convs)
    assert all(c._packed is None for c in (plain.whiten, *plain.convs))
    # the activations fused: the whitening conv's, each group's second conv's (the first's follows the pool)
    assert [c.post_act for c in convs] == [model.whiten_act] + ["identity", model.act] * 3
    scale = want.abs().max().item()
    assert (got.float() - want.float()).abs().max().item() <= 8 * TOL[dtype] * scale
