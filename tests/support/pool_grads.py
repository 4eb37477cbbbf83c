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


def pool_grad_parts(n: int, c: int, h: int, w: int, gen: torch.Generator
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dp, codes, dY): the pool's own gradient [n, c, h//2, w//2] bf16 (some
    values exactly +0 and -0, which the kernels skip), the argmax codes 0..3
    (uint8, row-major within the window) and the full-size dY that places
    each value at its code (zeros elsewhere, an odd last row/column zero),
    all channels_last."""
    hp, wp = h // 2, w // 2
    dp = torch.randn(n, c, hp, wp, generator=gen).bfloat16()
    zero = torch.rand(dp.shape, generator=gen) < 0.1
    dp[zero] = torch.where(torch.rand(dp.shape, generator=gen) < 0.5, 0.0, -0.0)[zero].bfloat16()
    codes = torch.randint(0, 4, dp.shape, generator=gen, dtype=torch.uint8)
    dense = torch.zeros(n, c, h, w, dtype=torch.bfloat16)
    for q in range(4):
        dense[:, :, q // 2:2 * hp:2, q % 2:2 * wp:2] = torch.where(codes == q, dp, torch.zeros_like(dp))
    return channels_last(dp), channels_last(codes), channels_last(dense)
