"""The Triton backend's registration with :mod:`dawnbench_fast.dispatch`
(imported by ``--kernels triton``): the model-level ops and the availability
probe. The kernels' custom ops live in :mod:`.custom_ops`, their autograd in
:mod:`.autograd_fns`, their FLOP/byte formulas in :mod:`.costs` (registered
with the roofline on import).

Model-level ops registered for ``--kernels triton``:
- ``conv_group(group, x)``: conv3x3 (+2x2 max-pool +BN statistics, fused) ->
  finalize -> conv3x3 with the BN+act prologue (+statistics) -> finalize ->
  BN+act. Backward, all ours: BN+act backward with the pool scatter, the
  convs' data gradients (the forward kernel on flipped filters) and weight
  gradients (split-K implicit GEMM that recomputes the BN+act prologue);
  ``autograd_fns.TRITON_DGRAD``/``TRITON_WGRAD`` = False switch those two GEMMs to
  ``aten.convolution_backward`` (cuDNN on a GPU).
- ``bn_act(x, bn, act)``: batch norm (training or eval) + activation.
- ``linear(x, weight)`` and ``matmul(a, b)``: the tensor-core GEMM.
- ``newton_schulz(g, steps, eps)``: Muon's orthogonalisation on that GEMM.
"""


from __future__ import annotations

import torch

from dawnbench_fast import dispatch
from dawnbench_fast.kernels.autograd_fns import _BNAct, _compute_dtype, _ConvGroup, _nhwc
from dawnbench_fast.kernels.custom_ops import augment_batch, gemm, gemm_axpby
from dawnbench_fast.kernels.launches import interpreting
from dawnbench_fast.optim.muon import ns_start


@dispatch.register("bn_act", "triton")
def bn_act(x: torch.Tensor, bn: torch.nn.BatchNorm2d, act: str = "gelu") -> torch.Tensor:
    """Triton batch norm + activation; x is NCHW-shaped (any memory format),
    the result is NCHW-shaped in channels_last memory."""
    y = _BNAct.apply(_nhwc(x), bn.weight, bn.bias, bn, act)
    return y.permute(0, 3, 1, 2)


@dispatch.register("conv_group", "triton")
def conv_group(group: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Triton forward/backward of a models.layers.ConvGroup (see module doc)."""
    if x.shape[-1] < 2 or x.shape[-2] < 2:
        raise ValueError(f"conv_group: input {tuple(x.shape)} is too small for the 2x2 pool")
    dtype = _compute_dtype(x)
    xh = _nhwc(x).to(dtype)
    n1, n2 = group.norm1, group.norm2
    y = _ConvGroup.apply(xh, group.conv1.weight, group.conv2.weight, n1.weight, n1.bias,
                         n2.weight, n2.bias, group, dtype)
    return y.permute(0, 3, 1, 2)


@dispatch.register("linear", "triton")
def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [*, K] @ weight[N, K].T on the Triton GEMM (autocast-aware)."""
    dtype = _compute_dtype(x)
    lead = x.shape[:-1]
    y = gemm(x.reshape(-1, x.shape[-1]).to(dtype), weight.to(dtype).t())
    return y.view(*lead, weight.shape[0])


@dispatch.register("matmul", "triton")
def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """2-D a @ b on the Triton GEMM, e.g. Newton-Schulz's X @ X.T (pass X.T:
    strides make the transpose free)."""
    return gemm(a, b)


@dispatch.register("newton_schulz", "triton")
@torch.no_grad()
def newton_schulz(g: torch.Tensor, steps: int = 3, eps: float = 1e-7,
                  coeffs: tuple[float, float, float] = (3.4445, -4.7750, 2.0315)) -> torch.Tensor:
    """Muon's quintic Newton-Schulz orthogonalisation in bf16 on the Triton GEMM,
    three kernels per iteration: G = X X^T; P = c G G + b G; X = P X + a X
    (the element-wise terms ride in the GEMM epilogue). Same contract as
    dawnbench_fast.optim.muon.newton_schulz (2-D input, bf16 result)."""
    a, b, c = coeffs
    x, transposed = ns_start(g, eps)
    for _ in range(steps):
        gram = gemm(x, x.T)
        poly = gemm_axpby(gram, gram, gram, c, b)
        x = gemm_axpby(poly, x, x, 1.0, a)
    return x.T if transposed else x


def _probe(device: torch.device) -> str | None:
    if device.type == "cuda":
        return None if torch.cuda.is_available() else "no CUDA device is visible"
    if device.type == "cpu" and interpreting():
        return None
    return (f"Triton kernels need a CUDA device, not {device.type} "
            "(TRITON_INTERPRET=1 runs them, slowly, in the CPU interpreter)")


dispatch.register_probe("triton", _probe)


@dispatch.register("augment", "triton")
def augment(padded: torch.Tensor, indices: torch.Tensor, params, scale: torch.Tensor,
            shift: torch.Tensor, size: int = 32,
            out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Same contract as ``data.augment.augment_torch`` (NCHW-shaped result in
    channels_last memory); ``out_dtype`` fp16/bf16 writes the model's dtype
    directly instead of fp32."""
    if padded.dtype != torch.uint8 or padded.dim() != 4:
        raise ValueError("augment: the dataset must be a uint8 NHWC tensor (reflect-padded)")
    dev = padded.device

    def vec(a, dtype=torch.int32):
        return torch.as_tensor(a).to(device=dev, dtype=dtype).contiguous()

    out = augment_batch(padded.contiguous(), vec(indices, torch.int64), vec(params.ox),
                        vec(params.oy), vec(params.flip), vec(params.cut_x), vec(params.cut_y),
                        int(params.cutout), vec(scale, torch.float32), vec(shift, torch.float32),
                        size, out_dtype)
    return out.permute(0, 3, 1, 2)


from dawnbench_fast.kernels import costs as _costs  # noqa: E402,F401  (registers FLOP/byte formulas)
