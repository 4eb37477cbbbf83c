"""The fast CIFAR-10 network (airbench94-class), written from the published
recipe facts: a frozen 2x2 patch-whitening conv, three conv groups without
residuals, a bias-free linear head with scaled logits.

Forward cost at widths 64/256/256: 118.15 M multiply-accumulates per image.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dawnbench_fast import dispatch
from dawnbench_fast.models.inference_conv import InferenceConv2d
from dawnbench_fast.models.layers import ConvGroup, linear
from dawnbench_fast.vocabulary import activation


class CifarNet(nn.Module):
    def __init__(
        self,
        widths: tuple[int, int, int] = (64, 256, 256),
        whiten_kernel: int = 2,
        act: str = "gelu",
        num_classes: int = 10,
        whiten_act: str | None = None,
    ):
        """``act`` after each conv of the groups; ``whiten_act`` after the
        whitening conv (default: ``act``; hiverge keeps GELU there, SiLU in
        the groups)."""
        super().__init__()
        self.whiten_kernel = whiten_kernel
        whiten_width = 2 * 3 * whiten_kernel**2  # eigenvectors and their negations
        self.whiten = nn.Conv2d(3, whiten_width, whiten_kernel, padding=0, bias=True)
        self.whiten.weight.requires_grad_(False)
        self.act = act
        self.whiten_act = whiten_act or act
        chans = (whiten_width, *widths)
        self.groups = nn.ModuleList(
            ConvGroup(chans[i], chans[i + 1], act=act) for i in range(len(widths))
        )
        self.head = nn.Linear(widths[-1], num_classes, bias=False)
        with torch.no_grad():  # unit-std head weights: with the 1/width logit scale below,
            self.head.weight.div_(self.head.weight.std())  # the recipe's initial logit size
        # Logits are divided by this fixed scale (the head's fan-in).
        self.logit_scale = 1.0 / widths[-1]
        self.kernels = "torch"
        self.linear = linear  # the head's product; replaced by set_kernels

    # -- kernels -----------------------------------------------------------
    def set_kernels(self, backend: str) -> CifarNet:
        """Use ``backend``'s implementations of ``conv_group``, ``bn_act`` and
        ``linear`` (reference ones where the backend has none); see
        dispatch.op_table."""
        self.kernels = backend
        self.linear = dispatch.get_op("linear", backend)
        for g in self.groups:
            g.impl = dispatch.get_op("conv_group", backend)
            g.bn_act = dispatch.get_op("bn_act", backend)
        return self

    # -- init --------------------------------------------------------------
    @torch.no_grad()
    def init_first_conv(self, form: str, images: torch.Tensor, eps: float = 5e-4) -> None:
        """The first conv ``form``: "whitened" (:meth:`init_whitening`, frozen:
        the recipe), "learned" (its seeded random init, trainable like the
        other convs) or "random" (that init, frozen): the whitening lesion.
        The bias starts at zero in each."""
        if form == "whitened":
            self.init_whitening(images, eps)
            return
        self.whiten.bias.zero_()
        self.whiten.weight.requires_grad_(form == "learned")

    @torch.no_grad()
    def init_whitening(self, images: torch.Tensor, eps: float = 5e-4) -> None:
        """Set the frozen whitening filters from normalised training images
        (N, 3, H, W): eigenvectors of the 2x2-patch second-moment matrix,
        scaled by 1/sqrt(eigenvalue + eps), concatenated with their negation.
        The bias is zeroed."""
        k = self.whiten_kernel
        eigvals, eigvecs = patch_eigens(images, k)
        filters = (eigvecs / torch.sqrt(eigvals + eps)[:, None]).view(-1, 3, k, k)
        w = torch.cat([filters, -filters])
        self.whiten.weight.copy_(w.to(self.whiten.weight.dtype))
        self.whiten.bias.zero_()

    # -- forward -----------------------------------------------------------
    def forward(self, x: torch.Tensor, whiten_bias_grad: bool = True) -> torch.Tensor:
        b = self.whiten.bias if whiten_bias_grad else self.whiten.bias.detach()
        x = F.conv2d(x, self.whiten.weight, b)
        x = activation(self.whiten_act).fn(x)
        for g in self.groups:
            x = g(x)
        x = F.max_pool2d(x, x.shape[-1])  # 3x3 -> 1x1 at 32 px input
        x = x.flatten(1)
        return self.linear(x, self.head.weight) * self.logit_scale


def patch_eigens(images: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigen-decomposition of the (uncentred) covariance of all k x k patches.

    Returns eigenvalues (descending) and eigenvectors as rows, each of length
    3*k*k in (channel, row, col) order, so a row reshapes to a conv filter.
    """
    x = images.float()
    c = x.shape[1]
    patches = x.unfold(2, k, 1).unfold(3, k, 1)  # N, C, H', W', k, k
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(-1, c * k * k).double()
    cov = patches.T @ patches / patches.shape[0]
    eigvals, eigvecs = torch.linalg.eigh(cov)
    return eigvals.flip(0).float(), eigvecs.T.flip(0).float()


def macs_per_image(model: CifarNet, hw: int = 32) -> int:
    """Analytic multiply-accumulates of one forward pass (convs + head)."""
    k = model.whiten_kernel
    side = hw - k + 1
    total = side * side * model.whiten.out_channels * 3 * k * k
    for g in model.groups:
        cin, cout = g.conv1.in_channels, g.conv1.out_channels
        total += side * side * cout * cin * 9
        side //= 2
        total += side * side * cout * cout * 9
    total += model.head.in_features * model.head.out_features
    return total


def _folded(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    """The weight and bias of conv followed by eval-mode BN as one conv.
    Valid across the max-pool between them too: BN's per-channel scale is
    positive (frozen weight 1), and max-pool commutes with a positive affine
    map. Checked on the device (a RuntimeError where it fails), so folding
    on the clock reads nothing back on the host."""
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    torch._assert_async((scale > 0).all(), "BN folding across max-pool needs positive BN scales")
    return conv.weight * scale[:, None, None, None], bn.bias - bn.running_mean * scale


class FoldedCifarNet(nn.Module):
    """Inference form of a trained :class:`CifarNet`: every BN folded into the
    conv before it, so a forward is 7 convs, the pools, activations and head.

    The folded convs are kept in ``dtype``, the dtype the evaluation's
    autocast computes in (runtime.compute_dtype): autocast would otherwise
    cast each fp32 weight and bias to it again at every forward, about a
    tenth of the one-image latency on the CPU
    (docs/results/latency-fold-zen4-f2b4ff2). The cast is the same rounding
    autocast makes, so the logits are the same bits. The whitening conv and
    the head are this net's own copies in that dtype too (no time to see:
    autocast keeps its casts of trained parameters), so that every parameter
    is this net's, frozen. On the CPU oneDNN reorders each folded conv's
    weight once, not at every call (models/inference_conv.py): most of a
    256-channel conv's time at one image a call. :meth:`refold` copies the
    source's current weights in (the whitening bias and the head train), as
    every evaluation does first."""

    def __init__(self, model: CifarNet, dtype: torch.dtype = torch.float32):
        super().__init__()
        # the net it was folded from (not a submodule: its parameters are not this net's)
        self.__dict__["source"] = model
        w = model.whiten
        self.whiten = InferenceConv2d(w.in_channels, w.out_channels, w.kernel_size, padding=0, bias=True,
                                      post_act=model.whiten_act)
        self.act = model.act
        # each group's two convs with its BN folded in (refold writes them); the second's activation
        # fused into it (the first's follows the max-pool, and none of the activations commutes with it)
        self.convs = nn.ModuleList(InferenceConv2d(c.in_channels, c.out_channels, 3, padding=1, bias=True,
                                                   post_act=model.act if c is g.conv2 else "identity")
                                   for g in model.groups for c in (g.conv1, g.conv2))
        self.head = nn.Linear(model.head.in_features, model.head.out_features, bias=False)
        self.logit_scale = model.logit_scale
        self.to(model.head.weight.device, dtype)
        self.refold(model)
        self.requires_grad_(False)  # frozen: every parameter is this net's own copy

    @torch.no_grad()
    def refold(self, model: CifarNet) -> FoldedCifarNet:
        """Fold ``model``'s current weights and BN statistics into this net's
        convs, and copy its whitening conv and head, in place (the same
        tensors, rounded to their dtype: a preallocated evaluation, nothing
        read back on the host); returns self, in eval mode."""
        pairs = [p for g in model.groups for p in ((g.conv1, g.norm1), (g.conv2, g.norm2))]
        for fused, (conv, bn) in zip(self.convs, pairs, strict=True):
            weight, bias = _folded(conv, bn)
            fused.weight.copy_(weight)
            fused.bias.copy_(bias)
        self.whiten.weight.copy_(model.whiten.weight)
        self.whiten.bias.copy_(model.whiten.bias)
        self.head.weight.copy_(model.head.weight)
        return self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = activation(self.act).fn
        x = self.whiten(x)  # the whitening activation fused in
        for i in range(0, len(self.convs), 2):
            x = act(F.max_pool2d(self.convs[i](x), 2))
            x = self.convs[i + 1](x)  # its activation fused in
        x = F.max_pool2d(x, x.shape[-1]).flatten(1)
        return self.head(x) * self.logit_scale
