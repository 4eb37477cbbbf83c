"""The ``augment`` op on Triton: one pass from the uint8 dataset to a
normalised training batch. Start here: this module holds the kernel, its
custom op and the dispatch registration, and imports the reference.

Gather by index, translate (the dataset is reflect-padded once, so a
translation is an offset into the padded image), horizontal flip, optional
cutout, and x = u8 * scale[c] + shift[c], written NHWC (channels_last) in the
requested dtype (fp32 as the reference, or fp16/bf16 for the model).
Per-image parameters come from :func:`dawnbench_fast.data.augment.augment_params`
(keyed by seed, epoch and image index), so every backend sees the same ones.

Faces of the op:
- reference: :func:`dawnbench_fast.data.augment.augment_torch` (backend
  ``torch``; imported here as ``reference``);
- Triton (this module): ``augment_kernel`` as ``dawnbench::augment``;
- CUDA C++ and CPU: csrc/augment.py (``dawnbench::csrc_augment``;
  csrc/augment.cu on CUDA tensors, the OpenMP build of the same math,
  csrc/augment_cpu.cpp, on CPU tensors: bit-identical to the reference),
  registered for ``--kernels cuda`` and ``--kernels cpu``; also a numba
  kernel, ``data.augment_cpu.augment_cpu``, measured slower and registered
  nowhere.
Tests: tests/ops/test_augment.py. Costs: kernels/augment_costs.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dawnbench_fast import dispatch
from dawnbench_fast.data.augment import AugmentParams
from dawnbench_fast.data.augment import augment_torch as reference
from dawnbench_fast.kernels import launches as L
from dawnbench_fast.kernels.augment_costs import COSTS
from dawnbench_fast.kernels.launches import new_output, record
from dawnbench_fast.roofline.registry import register_flop_formulas

__all__ = ["augment", "augment_batch", "augment_kernel", "reference"]


@triton.jit
def augment_kernel(
    padded_ptr, idx_ptr, ox_ptr, oy_ptr, flip_ptr, cutx_ptr, cuty_ptr, scale_ptr, shift_ptr,
    out_ptr, PH, PW, cutout,
    SIZE: tl.constexpr, C: tl.constexpr, BLOCK: tl.constexpr,
):
    b = tl.program_id(0)
    e = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)  # element of the output image
    ok = e < SIZE * SIZE * C
    c = e % C
    pix = e // C
    y = pix // SIZE
    x = pix % SIZE
    img = tl.load(idx_ptr + b).to(tl.int64)
    ox = tl.load(ox_ptr + b)
    oy = tl.load(oy_ptr + b)
    fl = tl.load(flip_ptr + b)
    sx = ox + tl.where(fl != 0, SIZE - 1 - x, x)
    sy = oy + y
    src = ((img * PH + sy) * PW + sx) * C + c
    v = tl.load(padded_ptr + src, mask=ok, other=0).to(tl.float32)
    sc = tl.load(scale_ptr + c, mask=ok, other=0.0)
    sh = tl.load(shift_ptr + c, mask=ok, other=0.0)
    v = v * sc + sh
    cx = tl.load(cutx_ptr + b)
    cy = tl.load(cuty_ptr + b)
    cut = (cutout > 0) & (x >= cx) & (x < cx + cutout) & (y >= cy) & (y < cy + cutout)
    v = tl.where(cut, 0.0, v)
    tl.store(out_ptr + b.to(tl.int64) * (SIZE * SIZE * C) + e,
             v.to(out_ptr.dtype.element_ty), mask=ok)


@torch.library.custom_op("dawnbench::augment", mutates_args=())
def augment_batch(
    padded: torch.Tensor, indices: torch.Tensor, ox: torch.Tensor, oy: torch.Tensor,
    flip: torch.Tensor, cut_x: torch.Tensor, cut_y: torch.Tensor, cutout: int,
    scale: torch.Tensor, shift: torch.Tensor, size: int, out_dtype: torch.dtype,
) -> torch.Tensor:
    """[B, size, size, C] normalised batch (NHWC) from the padded uint8 dataset."""
    _, PH, PW, C = padded.shape
    B = indices.shape[0]
    out = new_output((B, size, size, C), out_dtype, padded.device)
    block = min(4096, L.next_power_of_2(size * size * C))
    augment_kernel[(B, L.cdiv(size * size * C, block))](
        padded, indices, ox, oy, flip, cut_x, cut_y, scale, shift, out, PH, PW, int(cutout),
        SIZE=size, C=C, BLOCK=block, num_warps=8)
    record("augment")
    return out


@augment_batch.register_fake
def _(padded, indices, ox, oy, flip, cut_x, cut_y, cutout, scale, shift, size, out_dtype):
    return padded.new_empty((indices.shape[0], size, size, padded.shape[-1]), dtype=out_dtype)


@dispatch.register("augment", "triton")
def augment(padded: torch.Tensor, indices: torch.Tensor, params: AugmentParams, scale: torch.Tensor,
            shift: torch.Tensor, size: int = 32,
            out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Same contract as the reference (NCHW-shaped result in channels_last
    memory); ``out_dtype`` fp16/bf16 writes the model's dtype directly instead
    of fp32."""
    if padded.dtype != torch.uint8 or padded.dim() != 4:
        raise ValueError("augment: the dataset must be a uint8 NHWC tensor (reflect-padded)")
    dev = padded.device

    def vec(a, dtype=torch.int32):
        return a.to(device=dev, dtype=dtype).contiguous()

    out = augment_batch(padded.contiguous(), vec(indices, torch.int64), vec(params.ox),
                        vec(params.oy), vec(params.flip), vec(params.cut_x), vec(params.cut_y),
                        int(params.cutout), vec(scale, torch.float32), vec(shift, torch.float32),
                        size, out_dtype)
    return out.permute(0, 3, 1, 2)


# The roofline's FLOP/byte formulas of this op (kernels/augment_costs.py), also for FlopCounterMode:
# registered after the definitions, because torch attaches formulas to existing ops only.

register_flop_formulas(COSTS)
