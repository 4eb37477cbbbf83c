"""The ``cuda`` backend of ``--kernels``: our CUDA C++ kernels as torch custom
ops (so profiler traces and the roofline tool see ``dawnbench::csrc_*``), run
by the built extension ``dawnbench_fast._C`` when it has CUDA, else through
CuPy/NVRTC. The same ops on CPU tensors run the CPU (OpenMP) build of the same
math (see cpu_ops.py for what the ``cpu`` backend takes from it).

Every launch is wrapped in an nvtx range (no-ops without a profiler).
"""

from __future__ import annotations

import numpy as np
import nvtx
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import cupy_path, native
from dawnbench_fast.csrc.costs import COSTS
from dawnbench_fast.roofline.registry import register_flop_formulas
from dawnbench_fast.vocabulary import activation

DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
DTYPE_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
NVTX_DOMAIN = "dawnbench"


# --------------------------------------------------------------------------
# Which engine runs a CUDA tensor: the built extension, else CuPy.
# --------------------------------------------------------------------------
def _extension_reason() -> str | None:
    """None if the built extension can launch CUDA kernels here."""
    try:
        mod = native.load()
    except native.NativeUnavailable as e:
        return str(e)
    if not getattr(mod, "has_cuda", False):
        return "dawnbench_fast._C was built without CUDA (no nvcc at install time)"
    try:
        n = mod.cuda_device_count()
    except RuntimeError as e:
        return f"dawnbench_fast._C found no CUDA device ({e})"
    return None if n > 0 else "dawnbench_fast._C found no CUDA device"


_ENGINE: dict[str, str] = {}


def cuda_engine() -> str:
    """'extension' or 'cupy' (cached); raises KernelsUnavailable (one line)."""
    if "cuda" not in _ENGINE:
        ext = _extension_reason()
        if ext is None:
            _ENGINE["cuda"] = "extension"
        else:
            cp = cupy_path.unavailable_reason()
            if cp is not None:
                raise dispatch.KernelsUnavailable(
                    f"no CUDA C++ kernels can run here: {ext}; and {cp}")
            _ENGINE["cuda"] = "cupy"
    return _ENGINE["cuda"]


def probe(device: torch.device) -> str | None:
    """dispatch probe of backend ``cuda``: None if usable, else one line."""
    if device.type != "cuda":
        return (f"the CUDA C++ kernels need a CUDA device, not {device.type} "
                "(`--kernels cpu` runs their CPU build)")
    if not torch.cuda.is_available():
        return (f"torch {torch.__version__} sees no CUDA device, which the CUDA C++ kernels "
                "need (`--kernels cpu` runs their CPU build)")
    try:
        cuda_engine()
    except dispatch.KernelsUnavailable as e:
        return str(e)
    return None


dispatch.register_probe("cuda", probe)


_NP_OF = {torch.float32: np.float32, torch.bfloat16: np.int16, torch.float16: np.float16}


def new_output(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
               channels_last: bool = False) -> torch.Tensor:
    """An uninitialised output. On the CPU it is allocated through NumPy, which
    asks the kernel for huge pages on large arrays: first-touch page faults
    otherwise cost more than the kernels themselves (measured: 10k-image augment
    9-23 ms into a reused buffer, 44 ms into a fresh torch.empty)."""
    if device.type != "cpu" or dtype not in _NP_OF:
        t = torch.empty(shape, dtype=dtype, device=device)
        return t.contiguous(memory_format=torch.channels_last) if channels_last else t
    if channels_last:  # physical NHWC, viewed as NCHW
        n, c, h, w = shape
        base = torch.from_numpy(np.empty((n, h, w, c), dtype=_NP_OF[dtype]))
        return base.view(dtype).permute(0, 3, 1, 2)
    return torch.from_numpy(np.empty(shape, dtype=_NP_OF[dtype])).view(dtype)


def _stream_ptr() -> int:
    return torch.cuda.current_stream().cuda_stream


def _ptr(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.data_ptr()


# --------------------------------------------------------------------------
# BatchNorm + activation
# --------------------------------------------------------------------------
def layout(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(x dense in NCHW or NHWC memory, channels_last flag)."""
    if x.is_contiguous():
        return x, 0
    if x.is_contiguous(memory_format=torch.channels_last):
        return x, 1
    return x.contiguous(), 0


def partitions(m: int, c: int, cl: int) -> int:
    """Row partitions of the GPU partial-sum kernels: about 1k blocks in all,
    each with at least 2k rows of work."""
    blocks_per_part = (c + 31) // 32 if cl else c
    return max(1, min((m + 2047) // 2048, max(1, 1024 // blocks_per_part)))


def _check_x(x: torch.Tensor, name: str) -> None:
    if x.dtype not in DTYPE_CODES:
        raise TypeError(f"{name}: x must be float32, bfloat16 or float16, got {x.dtype}")
    if x.dim() != 4:
        raise ValueError(f"{name}: x must be (N, C, H, W), got shape {tuple(x.shape)}")


def _check_same(name: str, x: torch.Tensor, per_channel: dict) -> None:
    """Raw pointers go to the kernels: every tensor must be on x's device and
    per-channel ones must hold exactly C values, else memory is misread."""
    c = x.shape[1]
    for arg, t in per_channel.items():
        if t is None:
            continue
        if t.device != x.device:
            raise ValueError(f"{name}: {arg} is on {t.device} but x is on {x.device}")
        if t.numel() != c:
            raise ValueError(f"{name}: {arg} has {t.numel()} values, x has {c} channels")


def bn_parameters(
    op: str, weight: torch.Tensor, bias: torch.Tensor, running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None, training: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The fp32 contiguous BN parameters a C++ forward kernel reads: in
    training the running statistics are copies the kernel updates (functional
    ops return them), in eval they are read and must be there."""
    wt, bs = weight.float().contiguous(), bias.float().contiguous()
    if training:
        rm = running_mean.float().clone() if running_mean is not None else None
        rv = running_var.float().clone() if running_var is not None else None
        return wt, bs, rm, rv
    if running_mean is None or running_var is None:
        raise ValueError(f"{op}: eval mode needs running_mean and running_var")
    return wt, bs, running_mean.float().contiguous(), running_var.float().contiguous()


@torch.library.custom_op("dawnbench::csrc_bn_act_fwd", mutates_args=())
def bn_act_fwd(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
    running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
    training: bool, eps: float, momentum: float, act: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, stats, new_running_mean, new_running_var): y = act(batchnorm(x)),
    stats = [mean | invstd | scale | bias] (4*C fp32, kept for backward).

    Functional (autograd needs that): in training mode the updated running
    statistics come back as new tensors (empty when none were given) and the
    caller copies them into the module; in eval mode they are read."""
    _check_x(x, "csrc_bn_act_fwd")
    _check_same("csrc_bn_act_fwd", x, {"weight": weight, "bias": bias,
                                       "running_mean": running_mean, "running_var": running_var})
    x, cl = layout(x)
    n, c, h, w = x.shape
    y = new_output(tuple(x.shape), x.dtype, x.device, bool(cl))
    stats = torch.empty(4 * c, device=x.device, dtype=torch.float32)
    wt, bs, rm, rv = bn_parameters("csrc_bn_act_fwd", weight, bias, running_mean, running_var, training)
    a = activation(act).code  # the template argument of the C++ kernels
    with nvtx.annotate("csrc_bn_act_fwd", domain=NVTX_DOMAIN):
        if x.device.type == "cpu":
            native.load().bn_act_forward(
                DTYPE_CODES[x.dtype], _ptr(x), _ptr(y), _ptr(stats), _ptr(wt), _ptr(bs),
                _ptr(rm), _ptr(rv), n, c, h * w, cl, int(training), eps, momentum, a)
        else:
            p = partitions(n * h * w, c, cl)
            partial = torch.empty(p * c * 2, device=x.device, dtype=torch.float32)
            shift_k = torch.empty(c, device=x.device, dtype=torch.float32)
            if cuda_engine() == "extension":
                native.load().bn_act_forward_cuda(
                    DTYPE_CODES[x.dtype], _ptr(x), _ptr(y), _ptr(stats), _ptr(wt), _ptr(bs),
                    _ptr(rm), _ptr(rv), _ptr(partial), _ptr(shift_k), p, n, c, h * w, cl,
                    int(training), eps, momentum, a, _stream_ptr())
            else:
                cupy_path.bn_act_forward(
                    DTYPE_SUFFIX[x.dtype], x, y, stats, wt, bs, rm, rv, partial, shift_k, p, n,
                    c, h * w, cl, int(training), eps, momentum, a)
    empty = stats.new_empty(0)
    if training and rm is not None and rv is not None:
        return y, stats, rm, rv
    return y, stats, empty, empty.clone()


@bn_act_fwd.register_fake
def _(x, weight, bias, running_mean, running_var, training, eps, momentum, act):
    f = torch.float32
    c = x.shape[1] if training and running_mean is not None and running_var is not None else 0
    return (torch.empty_like(x), x.new_empty(4 * x.shape[1], dtype=f), x.new_empty(c, dtype=f),
            x.new_empty(c, dtype=f))


@torch.library.custom_op("dawnbench::csrc_bn_act_bwd", mutates_args=())
def bn_act_bwd(
    x: torch.Tensor, dy: torch.Tensor, stats: torch.Tensor, training: bool, act: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight, dbias) of bn_act_fwd."""
    _check_x(x, "csrc_bn_act_bwd")
    if dy.shape != x.shape or dy.device != x.device:
        raise ValueError(f"csrc_bn_act_bwd: dy {tuple(dy.shape)} on {dy.device} does not match "
                         f"x {tuple(x.shape)} on {x.device}")
    if stats.numel() != 4 * x.shape[1] or stats.dtype != torch.float32:
        raise ValueError("csrc_bn_act_bwd: stats must be the 4*C fp32 tensor of the forward")
    x, cl = layout(x)
    dy = dy.to(x.dtype)
    dy = dy.contiguous(memory_format=torch.channels_last) if cl else dy.contiguous()
    n, c, h, w = x.shape
    dx = new_output(tuple(x.shape), x.dtype, x.device, bool(cl))
    dweight = torch.empty(c, device=x.device, dtype=torch.float32)
    dbias = torch.empty(c, device=x.device, dtype=torch.float32)
    a = activation(act).code  # the template argument of the C++ kernels
    with nvtx.annotate("csrc_bn_act_bwd", domain=NVTX_DOMAIN):
        if x.device.type == "cpu":
            native.load().bn_act_backward(
                DTYPE_CODES[x.dtype], _ptr(x), _ptr(dy), _ptr(dx), _ptr(stats), _ptr(dweight),
                _ptr(dbias), n, c, h * w, cl, int(training), a)
        else:
            p = partitions(n * h * w, c, cl)
            partial = torch.empty(p * c * 2, device=x.device, dtype=torch.float32)
            coef = torch.empty(2 * c, device=x.device, dtype=torch.float32)
            if cuda_engine() == "extension":
                native.load().bn_act_backward_cuda(
                    DTYPE_CODES[x.dtype], _ptr(x), _ptr(dy), _ptr(dx), _ptr(stats),
                    _ptr(dweight), _ptr(dbias), _ptr(partial), _ptr(coef), p, n, c, h * w, cl,
                    int(training), a, _stream_ptr())
            else:
                cupy_path.bn_act_backward(
                    DTYPE_SUFFIX[x.dtype], x, dy, dx, stats, dweight, dbias, partial, coef, p, n,
                    c, h * w, cl, int(training), a)
    return dx, dweight, dbias


@bn_act_bwd.register_fake
def _(x, dy, stats, training, act):
    c = x.shape[1]
    f = torch.float32
    return torch.empty_like(x), x.new_empty(c, dtype=f), x.new_empty(c, dtype=f)


def _bn_setup(ctx, inputs, output) -> None:
    x, weight, bias, _rm, _rv, training, _eps, _momentum, act = inputs
    ctx.save_for_backward(x, output[1])
    ctx.training, ctx.act = training, act
    ctx.weight_dtype, ctx.bias_dtype = weight.dtype, bias.dtype


def _bn_backward(ctx, grad_y, _grad_stats, _grad_rm, _grad_rv):
    x, stats = ctx.saved_tensors
    dx, dweight, dbias = bn_act_bwd(x, grad_y, stats, ctx.training, ctx.act)
    return (dx, dweight.to(ctx.weight_dtype), dbias.to(ctx.bias_dtype), None, None, None, None,
            None, None)


bn_act_fwd.register_autograd(_bn_backward, setup_context=_bn_setup)


def bn_act(x: torch.Tensor, bn: torch.nn.BatchNorm2d, act: str = "gelu") -> torch.Tensor:
    """Same contract as the reference ``models.layers.bn_act`` (module state
    updated the same way: running stats and num_batches_tracked)."""
    args = bn_module_args(bn, act)
    y, _, new_rm, new_rv = bn_act_fwd(x, *args)
    update_running_stats(bn, args[4], new_rm, new_rv)
    return y


def bn_module_args(bn: torch.nn.BatchNorm2d, act: str) -> tuple:
    """A BatchNorm2d module as the functional C++ ops take it: (weight, bias,
    running_mean, running_var, use_batch_stats, eps, momentum, act), counting
    the batch as nn.BatchNorm2d does (num_batches_tracked, cumulative momentum)."""
    activation(act)  # one-line ValueError for an unknown name, before any state changes
    use_batch = bn.training or not bn.track_running_stats
    momentum = bn.momentum
    if bn.training and bn.track_running_stats and bn.num_batches_tracked is not None:
        bn.num_batches_tracked.add_(1)
        if momentum is None:  # cumulative moving average, as nn.BatchNorm2d
            momentum = 1.0 / float(bn.num_batches_tracked)
    weight = bn.weight if bn.weight is not None else torch.ones_like(bn.running_mean)
    bias = bn.bias if bn.bias is not None else torch.zeros_like(bn.running_mean)
    return (weight, bias, bn.running_mean, bn.running_var, use_batch, float(bn.eps),
            float(momentum or 0.0), act)


def update_running_stats(bn: torch.nn.BatchNorm2d, use_batch: bool, new_rm: torch.Tensor,
                         new_rv: torch.Tensor) -> None:
    """Copy the running statistics a functional op returned into the module."""
    if use_batch and new_rm.numel():
        with torch.no_grad():
            bn.running_mean.copy_(new_rm)
            bn.running_var.copy_(new_rv)


dispatch.register("bn_act", "cuda")(bn_act)


# --------------------------------------------------------------------------
# Augmentation
# --------------------------------------------------------------------------
def pack_params(params, device: torch.device) -> torch.Tensor:
    """AugmentParams -> (B, 5) int32 rows [ox, oy, flip, cut_x, cut_y]."""
    rows = np.stack([np.asarray(params.ox), np.asarray(params.oy),
                     np.asarray(params.flip).astype(np.int32), np.asarray(params.cut_x),
                     np.asarray(params.cut_y)], axis=1).astype(np.int32)
    return torch.from_numpy(rows).to(device)


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
    if b:  # the kernels read padded[indices[i]] unchecked
        lo, hi = (int(v) for v in torch.aminmax(idx))
        if lo < 0 or hi >= padded.shape[0]:
            raise IndexError(f"csrc_augment: image indices {lo}..{hi} outside the dataset's "
                             f"0..{padded.shape[0] - 1}")
        lo_xy = prm[:, :2].amin(0).tolist()
        hi_xy = prm[:, :2].amax(0).tolist()
        for i, (name, lim) in enumerate((("ox", pw - size), ("oy", ph - size))):
            if lo_xy[i] < 0 or hi_xy[i] > lim:
                raise ValueError(f"csrc_augment: {name} offsets must lie in 0..{lim} for a "
                                 f"{ph}x{pw} padded image and a {size}px crop")
    sc = scale.to(device=dev, dtype=torch.float32).contiguous()
    sh = shift.to(device=dev, dtype=torch.float32).contiguous()
    out = new_output((b, size, size, c), out_dtype, dev)
    with nvtx.annotate("csrc_augment", domain=NVTX_DOMAIN):
        if dev.type == "cpu":
            native.load().augment(DTYPE_CODES[out_dtype], _ptr(padded), _ptr(idx), _ptr(prm),
                                  _ptr(sc), _ptr(sh), _ptr(out), b, ph, pw, c, size, cutout)
        elif cuda_engine() == "extension":
            native.load().augment_cuda(DTYPE_CODES[out_dtype], _ptr(padded), _ptr(idx),
                                       _ptr(prm), _ptr(sc), _ptr(sh), _ptr(out), b, ph, pw, c,
                                       size, cutout, _stream_ptr())
        else:
            cupy_path.augment(DTYPE_SUFFIX[out_dtype], padded, idx, prm, sc, sh, out, b, ph, pw,
                              c, size, cutout)
    return out


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


# --------------------------------------------------------------------------
# Tensor-core GEMM
# --------------------------------------------------------------------------
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
            native.load().gemm_mma_emulated(dt, _ptr(a), _ptr(b), _ptr(c), m, n, k, a.stride(0),
                                            b.stride(0), c.stride(0))
        elif cuda_engine() == "extension":
            native.load().gemm_mma_cuda(dt, _ptr(a), _ptr(b), _ptr(c), m, n, k, a.stride(0),
                                        b.stride(0), c.stride(0), _stream_ptr())
        else:
            cupy_path.gemm(DTYPE_SUFFIX[a.dtype], a, b, c, m, n, k, a.stride(0), b.stride(0),
                           c.stride(0))
    return c


@gemm_mma.register_fake
def _(a, b):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=torch.float32)


# The roofline's FLOP/byte formulas of these ops (csrc/costs.py), also for FlopCounterMode:
# registered after the definitions, because torch attaches formulas to existing ops only.

register_flop_formulas(COSTS)
