"""The ``bias_act`` op's CUDA C++ and CPU faces: y = act(x + bias[None, :,
None, None]) on an (N, C, H, W) tensor, NCHW or channels_last, fp32 / bf16 /
fp16, as the custom ops ``dawnbench::csrc_bias_act`` / ``_bwd`` (so profiler
traces and the roofline see them), with autograd, registered for
``--kernels cuda`` (not for ``cpu``: below).

The math lives once, in csrc/bias_act_math.cuh (``__host__ __device__``;
the activation and its derivative are bn_act_math.cuh's): on CUDA tensors
csrc/bias_act.cu runs it (the extension, else CuPy: csrc/engine.py), on CPU
tensors the OpenMP loops of csrc/bias_act_cpu.cpp (so the tests check the
shared math here).

Why the ``cpu`` backend does not serve it (``no_face`` in dispatch.CATALOGUE):
it is not faster than the torch reference throughout. Measured on this
project's 2-core AMD EPYC, 2 threads, interleaved A/B runs (2026-11-24; other
jobs kept the load average at 1.5-3, so the spread is wide; the same cases are
``benchmarks/bench_csrc_cpu.py -k bias_act``), GELU at the CIFAR net's six BN
shapes, ours vs the reference: forward + backward at batch 500, bf16 channels_last 41 vs 73 ms
(median, load 1.5; 176 vs 394 ms at load 2.3), fp32 NCHW 36 vs 45 ms (168 vs
209 ms); forward alone at batch 1, bf16 channels_last 0.18 vs 0.115 ms (1.6x
slower), fp32 NCHW 0.16 vs 0.26 ms. A ``torch.library`` custom op in Python
costs ~15 us a call before any work, more than the reference's few ATen ops
on one image. The CPU build stays: it runs the shared math here, where the
tests check it (tests/ops/test_bias_act.py calls it directly).

Other faces: the reference :func:`dawnbench_fast.layer_ops.bias_act`
(backend ``torch``), Triton kernels/bias_act.py. Tests:
tests/ops/test_bias_act.py. Costs: csrc/bias_act_costs.py.
"""

from __future__ import annotations

import nvtx
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import cupy_path, native
from dawnbench_fast.csrc.bias_act_costs import COSTS
from dawnbench_fast.csrc.engine import (
    DTYPE_CODES,
    DTYPE_SUFFIX,
    NVTX_DOMAIN,
    cuda_engine,
    layout,
    new_output,
    partitions,
    ptr,
    stream_ptr,
)
from dawnbench_fast.layer_ops import check_bias_act, register_bias_act_autograd
from dawnbench_fast.roofline.registry import register_flop_formulas


def _fmt(cl: int) -> torch.memory_format:
    return torch.channels_last if cl else torch.contiguous_format


@torch.library.custom_op("dawnbench::csrc_bias_act", mutates_args=())
def bias_act_fwd(x: torch.Tensor, bias: torch.Tensor, act: str) -> torch.Tensor:
    """act(x + bias[c]) in x's dtype and layout (NCHW or channels_last)."""
    a = check_bias_act("csrc_bias_act", x, bias, act)
    x, cl = layout(x)
    n, c, h, w = x.shape
    y = new_output(tuple(x.shape), x.dtype, x.device, bool(cl))
    b = bias.float().contiguous()
    with nvtx.annotate("csrc_bias_act", domain=NVTX_DOMAIN):
        if x.device.type == "cpu":
            native.load().bias_act_forward(DTYPE_CODES[x.dtype], ptr(x), ptr(b), ptr(y), n, c, h * w,
                                           cl, a.code)
        elif cuda_engine() == "extension":
            native.load().bias_act_forward_cuda(DTYPE_CODES[x.dtype], ptr(x), ptr(b), ptr(y), n, c,
                                                h * w, cl, a.code, stream_ptr())
        else:
            cupy_path.bias_act_forward(DTYPE_SUFFIX[x.dtype], x, b, y, x.numel(), c,
                                       1 if cl else h * w, a.code)
    return y


@bias_act_fwd.register_fake
def _(x, bias, act):
    return torch.empty_like(x, memory_format=_fmt(layout(x)[1]))


@torch.library.custom_op("dawnbench::csrc_bias_act_bwd", mutates_args=())
def bias_act_bwd(dy: torch.Tensor, x: torch.Tensor, bias: torch.Tensor,
                 act: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx in x's dtype and layout, dbias fp32 [C]) of csrc_bias_act."""
    a = check_bias_act("csrc_bias_act_bwd", x, bias, act)
    if dy.shape != x.shape or dy.device != x.device:
        raise ValueError(f"csrc_bias_act_bwd: dy {tuple(dy.shape)} on {dy.device} does not match "
                         f"x {tuple(x.shape)} on {x.device}")
    x, cl = layout(x)
    dy = dy.to(x.dtype).contiguous(memory_format=_fmt(cl))
    n, c, h, w = x.shape
    dx = new_output(tuple(x.shape), x.dtype, x.device, bool(cl))
    dbias = torch.empty(c, device=x.device, dtype=torch.float32)
    b = bias.float().contiguous()
    with nvtx.annotate("csrc_bias_act_bwd", domain=NVTX_DOMAIN):
        if x.device.type == "cpu":
            native.load().bias_act_backward(DTYPE_CODES[x.dtype], ptr(x), ptr(dy), ptr(b), ptr(dx),
                                            ptr(dbias), n, c, h * w, cl, a.code)
        else:
            p = partitions(n * h * w, c, cl)
            partial = torch.empty(p * c, device=x.device, dtype=torch.float32)
            if cuda_engine() == "extension":
                native.load().bias_act_backward_cuda(
                    DTYPE_CODES[x.dtype], ptr(x), ptr(dy), ptr(b), ptr(dx), ptr(dbias),
                    ptr(partial), p, n, c, h * w, cl, a.code, stream_ptr())
            else:
                cupy_path.bias_act_backward(DTYPE_SUFFIX[x.dtype], x, dy, b, dx, dbias, partial, p,
                                            n, c, h * w, cl, a.code)
    return dx, dbias


@bias_act_bwd.register_fake
def _(dy, x, bias, act):
    dx = torch.empty_like(x, memory_format=_fmt(layout(x)[1]))
    return dx, x.new_empty((x.shape[1],), dtype=torch.float32)


register_bias_act_autograd(bias_act_fwd, bias_act_bwd)


def bias_act(x: torch.Tensor, bias: torch.Tensor, act: str = "gelu") -> torch.Tensor:
    """Same contract as the reference :func:`dawnbench_fast.layer_ops.bias_act`."""
    check_bias_act("bias_act", x, bias, act)
    return bias_act_fwd(x, bias, act)


dispatch.register("bias_act", "cuda")(bias_act)

# The roofline's FLOP/byte formulas of these ops (csrc/bias_act_costs.py), also for FlopCounterMode:
# registered after the definitions, because torch attaches formulas to existing ops only.
register_flop_formulas(COSTS)
