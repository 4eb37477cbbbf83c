"""The gradient a 2x2 max-pool hands back to the conv before it: one nonzero
per window and channel (at the window's argmax), bf16 in channels_last
memory, as the before-pool weight- and data-gradient kernels receive it."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def channels_last(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last)


def pool_grad(n: int, c: int, h: int, w: int, gen: torch.Generator) -> torch.Tensor:
    """dY [n, c, h, w]: random upstream values scattered through the argmax of
    each 2x2 window of a random map (an odd last row/column stays zero)."""
    y = torch.randn(n, c, h, w, generator=gen)
    pooled, where = F.max_pool2d(y, 2, return_indices=True)
    upstream = torch.randn(pooled.shape, generator=gen)
    return channels_last(F.max_unpool2d(upstream, where, 2, output_size=(h, w)).bfloat16())
