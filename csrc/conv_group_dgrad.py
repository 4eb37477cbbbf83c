"""The cpu conv group's 3x3 conv data gradient for a conv whose output feeds a
2x2 max-pool (csrc/conv_group_dgrad_pooled_cpu.cpp): ``dawnbench::
csrc_conv3x3_dgrad_pooled``, and the method switch that runs it in the
group's backward (csrc/conv_group.py). Tests:
tests/ops/test_conv_group_dgrad_pooled.py. Costs: csrc/conv_group_costs.py.
Benchmark: benchmarks/bench_conv_shapes.py::test_conv3x3_dgrad_pooled.

Why: dY of such a conv holds one nonzero per pool window and channel, and
oneDNN's dense data gradient multiplies the other three quarters too (about
390 ms of a 2.32 s step on Zen 4 for 64->256 @15 and 256->256 @7,
docs/ROOFLINE.md). The kernel scatters each nonzero alone: a quarter of
the products, two nonzeros of a window's code to a vdpbf16ps where the CPU
has AVX-512 BF16 (the pair form), else one fp32 FMA a product (the FMA
form).

Methods (the recipe's ``conv_dgrad``, ``DAWNBENCH_DGRAD`` or
:func:`set_dgrad_method`): ``pooled`` (this kernel before each 2x2 max-pool,
in its pair form where the CPU can, oneDNN's dense data gradient
elsewhere), ``pooled-fma`` (the same in the FMA form) or ``aten`` (oneDNN's
everywhere). The default is ``pooled``, except where oneDNN runs bf16 on
AMX tiles (:func:`default_method`), as for the weight gradient. Timed on an idle Zen 4
(docs/PERFORMANCE.md, "Levers"): x1.26 and x1.31 a call, x1.055 on the step,
every pair of arms faster; seeds 0-2 reach 94% with it. On an AMX Xeon
(family 6 model 207) oneDNN's dense one won: the step x1.15-1.26 faster with
``aten``. The kernel is deterministic (each dx
element sums in one order on any thread count).
"""

from __future__ import annotations

import os

import torch

from dawnbench_fast.csrc import native
from dawnbench_fast.csrc.conv_group_costs import COSTS
from dawnbench_fast.csrc.conv_group_wgrad import onednn_has_amx
from dawnbench_fast.csrc.conv_group_wgrad import supported as pairs_supported  # AVX-512 BF16, as there
from dawnbench_fast.csrc.engine import new_output
from dawnbench_fast.roofline.registry import register_flop_formulas
from dawnbench_fast.vocabulary import DGRAD_METHODS

DEFAULT_METHOD = "pooled"  # x1.055 on the step, idle Zen 4 (docs/PERFORMANCE.md)
AMX_METHOD = "aten"  # oneDNN's dense products on AMX tiles beat the sparse FMAs: x1.15-1.26 on the step
_METHOD: list[str] = []  # set_dgrad_method's value; empty: DAWNBENCH_DGRAD or the default
POOLED_METHODS = ("pooled", "pooled-fma")
# (x shape, w shape, dtype) -> the form that ran where the pooled kernel did
# (:func:`form_of`): conv_group.chosen_methods (run.json).
RAN: dict[tuple, str] = {}


def supported() -> bool:
    """Whether the C++ build in use has the kernel (both of its copies do)."""
    try:
        return hasattr(native.load(), "conv3x3_dgrad_pooled")
    except native.NativeUnavailable:
        return False


def form_of(method: str) -> str:
    """The form a pooled method runs here: ``pooled`` (the pairs) only where
    the CPU has them, else ``pooled-fma``."""
    return "pooled" if method == "pooled" and pairs_supported() else "pooled-fma"


def applies(g: torch.Tensor, w: torch.Tensor) -> bool:
    """The shapes and dtypes the kernel takes: bf16 CPU dY (N, O, H, W) with
    H, W >= 2 and w (O, I, 3, 3)."""
    return (g.dtype == torch.bfloat16 and w.dtype == torch.bfloat16 and g.device.type == "cpu"
            and g.dim() == 4 and w.dim() == 4 and tuple(w.shape[2:]) == (3, 3)
            and w.shape[0] == g.shape[1] and min(g.shape[2:]) >= 2 and supported())


def set_dgrad_method(method: str | None) -> None:
    """A method of DGRAD_METHODS for the rest of this process (None: back to
    ``DAWNBENCH_DGRAD``, unset: the default)."""
    if method is not None and method not in DGRAD_METHODS:
        raise ValueError(f"dgrad method must be one of {', '.join(DGRAD_METHODS)}, not {method!r}")
    _METHOD[:] = [] if method is None else [method]


def default_method() -> str:
    """The method when none is asked for: oneDNN's where it runs bf16 on AMX
    tiles (csrc/conv_group_wgrad.py's test: CPU flag, OS grant, ISA cap),
    else the sparse kernel."""
    return AMX_METHOD if onednn_has_amx() else DEFAULT_METHOD


def dgrad_method() -> str:
    """What set_dgrad_method or DAWNBENCH_DGRAD asked for, else :func:`default_method`."""
    method = (_METHOD[0] if _METHOD else os.environ.get("DAWNBENCH_DGRAD", "")) or default_method()
    if method not in DGRAD_METHODS:
        raise ValueError(f"DAWNBENCH_DGRAD must be one of {', '.join(DGRAD_METHODS)}, not {method!r}")
    return method


def dgrad_aten(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """oneDNN's dense data gradient (x is read for its shape and strides only)."""
    return torch.ops.aten.convolution_backward(
        g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, False, False])[0]


def input_grad(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, before_pool: bool) -> torch.Tensor:
    """dX of y = conv2d(x, w, padding=1) given dY = g, by the chosen method."""
    method = dgrad_method() if before_pool else "aten"
    if method in POOLED_METHODS and applies(g, w):
        RAN[(tuple(x.shape), tuple(w.shape), x.dtype)] = form_of(method)
        return conv3x3_dgrad_pooled(g, w, method == "pooled")
    return dgrad_aten(g, x, w)


@torch.library.custom_op("dawnbench::csrc_conv3x3_dgrad_pooled", mutates_args=())
def conv3x3_dgrad_pooled(g: torch.Tensor, w: torch.Tensor, pairs: bool = True) -> torch.Tensor:
    """dX (N, I, H, W) bf16, channels_last, of y = conv2d(x, w, padding=1)
    given dY = g (N, O, H, W) from a 2x2 / stride-2 max-pool: at most one
    nonzero per window and channel, and only those are multiplied (fp32
    sums, rounded once; ``pairs``: the pair form where the CPU has it).
    Where g is not such a gradient the kernel says so and oneDNN's dense
    data gradient runs instead, so the result is always dX. A custom op so
    that the profiler, and with it the roofline, sees it."""
    if not applies(g, w):
        raise ValueError(f"conv3x3_dgrad_pooled takes bf16 CPU dY (N, O, H>=2, W>=2) and w "
                         f"(O, I, 3, 3), not dY {g.dtype} {list(g.shape)}, w {w.dtype} {list(w.shape)}")
    n, _, h, wd = g.shape
    cin = w.shape[1]
    g = g.contiguous(memory_format=torch.channels_last)
    wc = w.contiguous()
    dx = new_output((n, cin, h, wd), torch.bfloat16, g.device, True)
    rc = native.load().conv3x3_dgrad_pooled(g.data_ptr(), 0, wc.data_ptr(), dx.data_ptr(), n, h, wd,
                                            cin, w.shape[0], pairs and pairs_supported())
    if rc == 2:  # not a max-pool's gradient
        return dgrad_aten(g, _nhwc_like(g, cin), w).contiguous(memory_format=torch.channels_last)
    if rc != 0:
        raise RuntimeError("conv3x3_dgrad_pooled refused its arguments (see cpu_kernels.h)")
    return dx


@conv3x3_dgrad_pooled.register_fake
def _(g, w, pairs=True):
    return _nhwc_like(g, w.shape[1])


@torch.library.custom_op("dawnbench::csrc_conv3x3_dgrad_from_pool", mutates_args=())
def conv3x3_dgrad_from_pool(dp: torch.Tensor, codes: torch.Tensor, w: torch.Tensor, in_h: int,
                            in_w: int, pairs: bool = True) -> torch.Tensor:
    """conv3x3_dgrad_pooled from the pool's own gradient: dp (N, O, in_h/2,
    in_w/2) and codes (the same shape, uint8: each window's argmax 0..3, from
    csrc_pool_bn_act_fwd) instead of the full-size dY; dX (N, I, in_h, in_w).
    The same sums in the same order, so the same bits, without writing or
    reading the full-size dY (csrc/conv_group.py's ConvPoolBnAct)."""
    n, o = dp.shape[:2]
    shape = (n, o, in_h // 2, in_w // 2)
    if tuple(dp.shape) != shape or tuple(codes.shape) != shape or codes.dtype != torch.uint8:
        raise ValueError(f"conv3x3_dgrad_from_pool: dp {list(dp.shape)} and codes {list(codes.shape)} "
                         f"{codes.dtype} must be uint8 codes and a gradient of shape {list(shape)}")
    if not applies(_nhwc_like(dp, o, in_h, in_w), w):
        raise ValueError(f"conv3x3_dgrad_from_pool takes bf16 CPU dp and w (O, I, 3, 3) with a map of "
                         f"2x2 or more, not dp {dp.dtype} {list(dp.shape)}, w {w.dtype} {list(w.shape)}")
    dp, codes = (t.contiguous(memory_format=torch.channels_last) for t in (dp, codes))
    wc = w.contiguous()  # held: the kernel reads it through a pointer
    cin = w.shape[1]
    dx = new_output((n, cin, in_h, in_w), torch.bfloat16, dp.device, True)
    rc = native.load().conv3x3_dgrad_pooled(dp.data_ptr(), codes.data_ptr(), wc.data_ptr(),
                                            dx.data_ptr(), n, in_h, in_w, cin, o, pairs and pairs_supported())
    if rc != 0:
        raise RuntimeError("conv3x3_dgrad_from_pool refused its arguments (see cpu_kernels.h)")
    return dx


@conv3x3_dgrad_from_pool.register_fake
def _(dp, codes, w, in_h, in_w, pairs=True):
    return _nhwc_like(dp, w.shape[1], in_h, in_w)


def _nhwc_like(g: torch.Tensor, channels: int, h: int | None = None, wd: int | None = None) -> torch.Tensor:
    """An uninitialised (N, channels, H, W) channels_last tensor beside g (H, W:
    g's unless given): dX's shape, strides and dtype (the dense fallback reads
    only those of x)."""
    n, _, gh, gw = g.shape
    return torch.empty((n, channels, gh if h is None else h, gw if wd is None else wd), dtype=g.dtype,
                       device=g.device, memory_format=torch.channels_last)


# The roofline's FLOP/byte formulas of these ops (csrc/conv_group_costs.py), also for FlopCounterMode.
register_flop_formulas(COSTS)
