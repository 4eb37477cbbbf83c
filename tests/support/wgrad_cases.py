"""Inputs, float64 reference and error bound shared by the 3x3 conv
weight-gradient kernels' tests (dpbf16, AMX): bf16 NHWC x and dY, a bf16
weight, aten's convolution_backward in float64 on the same values.

The bound, per element: the kernels sum bf16 products in fp32 and round the
result to bf16 once, so |got - ref| <= 2^-8 |ref| (the final rounding) plus
2^-16 times the sum of |products| (fp32 summation, generous for the tests'
sizes)."""

from __future__ import annotations

import torch


def inputs(n: int, cin: int, cout: int, h: int, w: int, seed: int):
    """(x, dY, w): random bf16, x and dY channels_last."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, cin, h, w, generator=gen).bfloat16().contiguous(memory_format=torch.channels_last)
    g = torch.randn(n, cout, h, w, generator=gen).bfloat16().contiguous(memory_format=torch.channels_last)
    wt = (torch.randn(cout, cin, 3, 3, generator=gen) / (3 * cin**0.5)).bfloat16()
    return x, g, wt


def reference(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor):
    """(dW, sum of |products|) in float64."""
    def wgrad(a, b):
        return torch.ops.aten.convolution_backward(
            b, a, w.double(), None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False])[1]
    return wgrad(x.double(), g.double()), wgrad(x.double().abs(), g.double().abs())


def error_over_bound(got: torch.Tensor, x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> float:
    """The largest element error as a multiple of the bound (<= 1 passes)."""
    want, magnitude = reference(x, g, w)
    bound = 2.0**-8 * want.abs() + 2.0**-16 * magnitude + 1e-30
    return ((got.double() - want).abs() / bound).max().item()
