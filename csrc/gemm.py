"""The GEMM's CUDA C++ face: fp32 a @ b for fp16/bf16 operands on the tensor
cores (mma.sync m16n8k16 tiles, csrc/gemm_mma.cu; tile geometry in
csrc/gemm_mma_tile.cuh) as the custom op ``dawnbench::csrc_gemm_mma``, run by
the extension, else CuPy (csrc/engine.py). On CPU tensors it runs the same
tiles with the mma emulated (csrc/gemm_mma_cpu.cpp): slow, for tests.

Registered for no op: ``linear``, ``matmul`` and ``newton_schulz`` are served
by torch on the ``cuda`` and ``cpu`` backends (cuBLAS, oneDNN), and this
kernel is a tested reference, unmeasured against cuBLAS (dispatch.CATALOGUE's
``no_face`` says so). Other faces: the references in
:mod:`dawnbench_fast.newton_schulz` and :func:`dawnbench_fast.layer_ops.linear`,
Triton kernels/gemm.py. Tests: tests/ops/test_gemm.py. Costs:
csrc/gemm_costs.py.
"""

from __future__ import annotations

import nvtx
import torch

from dawnbench_fast.csrc import cupy_path, native
from dawnbench_fast.csrc.engine import (
    DTYPE_CODES,
    DTYPE_SUFFIX,
    NVTX_DOMAIN,
    cuda_engine,
    ptr,
    stream_ptr,
)
from dawnbench_fast.csrc.gemm_costs import COSTS
from dawnbench_fast.roofline.registry import register_flop_formulas


@torch.library.custom_op("dawnbench::csrc_gemm_mma", mutates_args=())
def gemm_mma(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp32 a @ b for fp16/bf16 [M, K] @ [K, N] on the tensor cores (CUDA only;
    on CPU tensors it runs the kernel's tiles with the mma emulated: slow, for
    tests)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"csrc_gemm_mma needs [M, K] @ [K, N], got {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"csrc_gemm_mma takes float16 or bfloat16, got {a.dtype}")
    if a.device != b.device:
        raise ValueError(f"csrc_gemm_mma: a is on {a.device} but b on {b.device}")
    b = b.to(a.dtype)
    a = a if a.stride(1) == 1 else a.contiguous()
    b = b if b.stride(1) == 1 else b.contiguous()
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=torch.float32)
    if m == 0 or n == 0:
        return c
    if k == 0:
        return c.zero_()
    dt = DTYPE_CODES[a.dtype]
    with nvtx.annotate("csrc_gemm_mma", domain=NVTX_DOMAIN):
        if a.device.type == "cpu":
            native.load().gemm_mma_emulated(dt, ptr(a), ptr(b), ptr(c), m, n, k, a.stride(0),
                                            b.stride(0), c.stride(0))
        elif cuda_engine() == "extension":
            native.load().gemm_mma_cuda(dt, ptr(a), ptr(b), ptr(c), m, n, k, a.stride(0),
                                        b.stride(0), c.stride(0), stream_ptr())
        else:
            cupy_path.gemm(DTYPE_SUFFIX[a.dtype], a, b, c, m, n, k, a.stride(0), b.stride(0),
                           c.stride(0))
    return c


@gemm_mma.register_fake
def _(a, b):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=torch.float32)


# The roofline's FLOP/byte formulas of this op (csrc/gemm_costs.py), also for FlopCounterMode:
# registered after the definition, because torch attaches formulas to existing ops only.
register_flop_formulas(COSTS)
