"""The ``augment`` op's CUDA C++ and CPU faces: one pass from the padded
uint8 dataset to a normalised training batch (crop at an offset, flip,
cutout, x = u8 * scale[c] + shift[c]) as the custom op ``dawnbench::csrc_augment``,
registered for ``--kernels cuda`` and ``--kernels cpu``.

The per-pixel math lives once, in csrc/augment_math.cuh (no fused
multiply-add: fp32 output bit-identical to the reference): on CUDA tensors
csrc/augment.cu runs it (the extension, else CuPy: csrc/engine.py), on CPU
tensors the OpenMP loop of csrc/augment_cpu.cpp. On the CPU it is faster
than the numba kernel of data/augment_cpu.py (and bit-identical to it), which
is therefore registered nowhere: this module is the one place that says which
``augment`` the cpu backend serves.

Other faces: the reference :func:`dawnbench_fast.data.augment.augment_torch`
(backend ``torch``), Triton kernels/augment.py. Tests:
tests/ops/test_augment.py. Costs: csrc/augment_costs.py.
"""

from __future__ import annotations

import nvtx
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import cupy_path, native
from dawnbench_fast.csrc.augment_costs import COSTS
from dawnbench_fast.csrc.engine import (
    DTYPE_CODES,
    DTYPE_SUFFIX,
    NVTX_DOMAIN,
    cuda_engine,
    new_output,
    ptr,
    stream_ptr,
)
from dawnbench_fast.roofline.registry import register_flop_formulas


def pack_params(params, device: torch.device) -> torch.Tensor:
    """AugmentParams -> (B, 5) int32 rows [ox, oy, flip, cut_x, cut_y], on ``device``."""
    fields = (params.ox, params.oy, params.flip, params.cut_x, params.cut_y)
    return torch.stack([torch.as_tensor(f).to(device=device, dtype=torch.int32) for f in fields], 1)


@torch.library.custom_op("dawnbench::csrc_augment", mutates_args=())
def augment_op(padded: torch.Tensor, indices: torch.Tensor, params: torch.Tensor,
               scale: torch.Tensor, shift: torch.Tensor, size: int, cutout: int,
               out_dtype: torch.dtype) -> torch.Tensor:
    """(B, size, size, C) batch in out_dtype from the padded uint8 NHWC dataset."""
    if padded.dtype != torch.uint8 or padded.dim() != 4 or not padded.is_contiguous():
        raise ValueError("csrc_augment: the dataset must be a contiguous uint8 NHWC tensor")
    if out_dtype not in DTYPE_CODES:
        raise TypeError(f"csrc_augment: out_dtype must be float32/bfloat16/float16, not {out_dtype}")
    _, ph, pw, c = padded.shape
    if c > 0 and (scale.numel() != c or shift.numel() != c):
        raise ValueError(f"csrc_augment: scale and shift need {c} entries (one per channel)")
    b = indices.shape[0]
    dev = padded.device
    idx = indices.to(device=dev, dtype=torch.int64).contiguous()
    prm = params.to(device=dev, dtype=torch.int32).contiguous()
    if prm.shape != (b, 5):
        raise ValueError(f"csrc_augment: params must be ({b}, 5) int32 rows, got {tuple(prm.shape)}")
    # The kernels read padded[indices[i]] unchecked: checked on the device, without a host read,
    # except inside a CUDA graph's capture: a failed device-side assert is sticky (every later
    # kernel of the process fails), and the same shapes and limits were checked by the eager
    # warm-up steps that ran before the capture.
    if b and not _capturing(dev):
        n = padded.shape[0]
        torch._assert_async(((idx >= 0) & (idx < n)).all(),
                            f"csrc_augment: image indices outside the dataset's 0..{n - 1}")
        for i, (name, lim) in enumerate((("ox", pw - size), ("oy", ph - size))):
            torch._assert_async(((prm[:, i] >= 0) & (prm[:, i] <= lim)).all(),
                                f"csrc_augment: {name} offsets must lie in 0..{lim} for a {ph}x{pw} "
                                f"padded image and a {size}px crop")
    sc = scale.to(device=dev, dtype=torch.float32).contiguous()
    sh = shift.to(device=dev, dtype=torch.float32).contiguous()
    out = new_output((b, size, size, c), out_dtype, dev)
    with nvtx.annotate("csrc_augment", domain=NVTX_DOMAIN):
        if dev.type == "cpu":
            native.load().augment(DTYPE_CODES[out_dtype], ptr(padded), ptr(idx), ptr(prm),
                                  ptr(sc), ptr(sh), ptr(out), b, ph, pw, c, size, cutout)
        elif cuda_engine() == "extension":
            native.load().augment_cuda(DTYPE_CODES[out_dtype], ptr(padded), ptr(idx),
                                       ptr(prm), ptr(sc), ptr(sh), ptr(out), b, ph, pw, c,
                                       size, cutout, stream_ptr())
        else:
            cupy_path.augment(DTYPE_SUFFIX[out_dtype], padded, idx, prm, sc, sh, out, b, ph, pw,
                              c, size, cutout)
    return out


def _capturing(device: torch.device) -> bool:
    """Whether ``device``'s current stream is capturing a CUDA graph (a host query, no synchronisation)."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


@augment_op.register_fake
def _(padded, indices, params, scale, shift, size, cutout, out_dtype):
    return padded.new_empty((indices.shape[0], size, size, padded.shape[-1]), dtype=out_dtype)


def augment(padded: torch.Tensor, indices: torch.Tensor, params, scale: torch.Tensor,
            shift: torch.Tensor, size: int = 32,
            out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Same contract as ``data.augment.augment_torch``: an NCHW-shaped batch in
    channels_last memory; fp32 output is bit-identical to the reference."""
    out = augment_op(padded, indices, pack_params(params, padded.device), scale, shift, size,
                     int(params.cutout), out_dtype)
    return out.permute(0, 3, 1, 2)



dispatch.register("augment", "cuda")(augment)
dispatch.register("augment", "cpu")(augment)

# The roofline's FLOP/byte formulas of this op (csrc/augment_costs.py), also for FlopCounterMode:
# registered after the definition, because torch attaches formulas to existing ops only.
register_flop_formulas(COSTS)
