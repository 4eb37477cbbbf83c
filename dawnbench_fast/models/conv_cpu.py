"""The ``cpu`` backend's 3x3 convolution: oneDNN forward and input gradient,
with the weight gradient computed by whichever of three methods is fastest
for each layer shape on this CPU (timed once, during warm-up).

Why: PyTorch's bf16 weight-gradient convolution on CPU falls off a cliff for
some shapes and thread counts (64->256 channels at 15x15, batch 500: 2.0 s
with 2 threads against 0.43 s with 1 thread and 0.70 s for the fp32 kernel,
measured here under load, see docs/PERFORMANCE.md), while the other methods
do not; which one wins depends on the CPU, the threads and the load, so it is
measured rather than assumed.

Methods for dW (Cout x Cin*9):
- ``aten``: torch's convolution_backward in the input dtype;
- ``fp32``: torch's convolution_backward on fp32 copies of x and dY;
- ``im2col``: dY^T (Cout x BHW) @ im2col(x) (BHW x Cin*9), bf16 in, fp32 accumulate.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from dawnbench_fast.dispatch import register
from dawnbench_fast.models.layers import ConvGroup, bn_act

WGRAD_METHODS = ("aten", "fp32", "im2col")
# (x shape, w shape, dtype) -> chosen method; filled by timing on first use.
_CHOICE: dict[tuple, str] = {}
# Forced method for tests and benchmarks (None = autotune).
FORCE: str | None = None


def _wgrad_aten(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.convolution_backward(
        g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False]
    )[1]


def _wgrad_fp32(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return _wgrad_aten(x.float(), g.float(), w.float()).to(w.dtype)


def _wgrad_im2col(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    n, cin, h, wd = x.shape
    cout = w.shape[0]
    xh = F.pad(x, (1, 1, 1, 1)).permute(0, 2, 3, 1)  # N, H+2, W+2, Cin (a view if channels_last)
    cols = xh.unfold(1, 3, 1).unfold(2, 3, 1).reshape(n * h * wd, cin * 9)  # (Cin, kh, kw) order
    gh = g.permute(0, 2, 3, 1).reshape(n * h * wd, cout)
    return (gh.T @ cols).view(cout, cin, 3, 3)


_METHODS = {"aten": _wgrad_aten, "fp32": _wgrad_fp32, "im2col": _wgrad_im2col}


def choose_wgrad(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> str:
    """The fastest method for this shape, by the best of two timed calls each
    (the first call of a shape happens in the warm-up, outside the clock)."""
    if FORCE is not None:
        return FORCE
    key = (tuple(x.shape), tuple(w.shape), x.dtype)
    if key not in _CHOICE:
        times = {name: float("inf") for name in _METHODS}
        for _ in range(2):  # best of two: one slow outlier must not decide
            for name, fn in _METHODS.items():
                t0 = time.perf_counter()
                fn(x, g, w)
                times[name] = min(times[name], time.perf_counter() - t0)
        _CHOICE[key] = min(times, key=times.get)
    return _CHOICE[key]


def chosen_methods() -> dict[str, str]:
    """Shape -> method, for run.json."""
    return {f"x{list(k[0])} w{list(k[1])} {k[2]}".replace("torch.", ""): v for k, v in _CHOICE.items()}


class Conv3x3(torch.autograd.Function):
    """Stride-1, padding-1 conv without bias."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        return F.conv2d(x, w, padding=1)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        x, w = ctx.saved_tensors
        g = g.contiguous(memory_format=torch.channels_last)
        gx = gw = None
        if ctx.needs_input_grad[0]:
            gx = torch.ops.aten.convolution_backward(
                g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, False, False]
            )[0]
        if ctx.needs_input_grad[1]:
            gw = _METHODS[choose_wgrad(x, g, w)](x, g, w)
        return gx, gw


def conv3x3(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Autocast-aware entry: the weight is cast to the activation dtype the way
    autocast would, and the cast stays differentiable."""
    if torch.is_autocast_enabled("cpu"):
        x = x.to(torch.get_autocast_dtype("cpu"))
    w = weight.to(x.dtype)
    with torch.autocast("cpu", enabled=False):
        return Conv3x3.apply(x, w)


@register("conv_group", "cpu")
def conv_group_cpu(group: ConvGroup, x: torch.Tensor) -> torch.Tensor:
    """The reference group with the shape-tuned convolution."""
    act = getattr(group, "bn_act", bn_act)
    x = group.pool(conv3x3(x, group.conv1.weight))
    x = act(x, group.norm1, group.act)
    x = conv3x3(x, group.conv2.weight)
    return act(x, group.norm2, group.act)
