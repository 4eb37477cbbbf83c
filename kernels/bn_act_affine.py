"""y = act(x * scale[c] + shift[c]) over an NHWC activation viewed as R x C:
the element-wise half of batch norm + activation (scale/shift come from
:mod:`.bn_act_finalize`). Also used in backward to recompute the activated conv
input instead of storing it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dawnbench_fast.kernels.activations import apply_act
from dawnbench_fast.vocabulary import activation


@triton.jit
def affine_act_kernel(
    x_ptr, scale_ptr, shift_ptr, y_ptr, R, C,
    ACT: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    mask = (rows < R)[:, None] & cmask[None, :]
    offs = rows.to(tl.int64)[:, None] * C + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    scale = tl.load(scale_ptr + cols, mask=cmask, other=0.0)
    shift = tl.load(shift_ptr + cols, mask=cmask, other=0.0)
    y = apply_act(x * scale[None, :] + shift[None, :], ACT)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def affine_act_reference(
    x2d: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, act: str
) -> torch.Tensor:
    """Reference in fp32, cast back to the input dtype."""
    return activation(act).fn(x2d.float() * scale + shift).to(x2d.dtype)
