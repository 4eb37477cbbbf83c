"""The cpu conv group's 3x3 conv weight gradient (csrc/conv_group_wgrad_cpu.cpp:
AVX-512 BF16 ``vdpbf16ps``, fp32 accumulation), its ``dpbf16`` method
(csrc/conv_group.py chooses the method), with the variant for a conv before
a 2x2 max-pool (csrc/conv_group_wgrad_pooled_cpu.cpp). Tests:
tests/ops/test_conv_group_wgrad.py, tests/ops/test_conv_group_wgrad_pooled.py.
Costs: csrc/conv_group_costs.py.

Why: oneDNN's bf16 weight gradient ran at 250-390 GFLOP/s on this project's
CPU class, against 440-560 for the forwards of the same shapes, and took a
third of the training step; this kernel skips the border taps oneDNN
multiplies by padding (docs/PERFORMANCE.md, "The conv weight gradient").
It is the default wherever it applies (bf16 input, output channels a
multiple of 16, a CPU with AVX-512 BF16) and oneDNN has no AMX tiles: a fixed
choice, never timed, so the same seed runs the same kernels on every machine
of a class. With AMX (Intel Xeon since Sapphire Rapids) oneDNN's weight
gradient ran 1.3-7x faster than this kernel, so there it stays the default
and ``DAWNBENCH_WGRAD=dpbf16`` still forces this one.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch

from dawnbench_fast.csrc import native
from dawnbench_fast.csrc.conv_group_costs import COSTS
from dawnbench_fast.csrc.engine import new_output
from dawnbench_fast.hardware.machine import cpu_flags, hidden_cpu_flags
from dawnbench_fast.roofline.registry import register_flop_formulas


def _native_says(check: str, flag: str) -> bool:
    """The C++ build's answer to ``check()`` (it asks CPUID); False without a
    build, or where DAWNBENCH_HIDE_CPU_FLAGS hides the CPU ``flag`` it needs."""
    if flag in hidden_cpu_flags():
        return False
    try:
        return bool(getattr(native.load(), check)())
    except native.NativeUnavailable:
        return False


def supported() -> bool:
    """Whether the C++ build in use has the kernel and this CPU runs it."""
    return _native_says("conv3x3_wgrad_supported", "avx512_bf16")


def _bf16_3x3(x: torch.Tensor, w: torch.Tensor) -> bool:
    """bf16 CPU x and a 3x3 w over x's channels: what every kernel here takes."""
    return (x.dtype == torch.bfloat16 and w.dtype == torch.bfloat16 and x.device.type == "cpu"
            and x.dim() == 4 and tuple(w.shape[1:]) == (x.shape[1], 3, 3))


def applies(x: torch.Tensor, w: torch.Tensor) -> bool:
    """The shapes and dtypes the kernel takes (the caller falls back to aten)."""
    return _bf16_3x3(x, w) and w.shape[0] % 16 == 0 and supported()


@functools.cache
def onednn_has_amx() -> bool:
    """Whether oneDNN runs bf16 convolutions on AMX tiles in this process: the
    CPU has them, the OS grants them (torch's own check), and
    ``ONEDNN_MAX_CPU_ISA`` (or ``DNNL_MAX_CPU_ISA``), when set, allows them."""
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "ALL").upper()
    if "amx_bf16" not in cpu_flags() or (cap != "ALL" and "AMX" not in cap):
        return False
    grant = getattr(torch._C._cpu, "_init_amx", None)  # asks the OS for the tile state
    return bool(grant()) if grant is not None else True


def preferred(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Where the default runs this kernel: it applies and oneDNN lacks AMX."""
    return applies(x, w) and not onednn_has_amx()


def _checked(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor, op: str = "conv3x3_wgrad",
             takes: Callable = applies,
             needs: str = "with output channels a multiple of 16 on a CPU with AVX-512 BF16",
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """x and g in channels_last, or a ValueError naming what ``op`` cannot take."""
    if not takes(x, w) or g.dtype != x.dtype:
        raise ValueError(f"{op} takes bf16 CPU x, dY and w {needs}, not x {x.dtype} "
                         f"{list(x.shape)}, dY {g.dtype}, w {w.dtype} {list(w.shape)}")
    n, _, h, wd = x.shape
    if tuple(g.shape) != (n, w.shape[0], h, wd):
        raise ValueError(f"{op}: dY {list(g.shape)} does not match x {list(x.shape)} "
                         f"and w {list(w.shape)} (stride 1, padding 1)")
    return x.contiguous(memory_format=torch.channels_last), g.contiguous(memory_format=torch.channels_last)


@torch.library.custom_op("dawnbench::csrc_conv3x3_wgrad", mutates_args=())
def conv3x3_wgrad(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """dW of y = conv2d(x, w, padding=1) given dY = g, in w's dtype and shape
    (summed in fp32, rounded once, as aten's bf16 weight gradient is). A custom
    op so that the profiler, and with it the roofline, sees it by name."""
    x, g = _checked(x, g, w)
    n, cin, h, wd = x.shape
    cout = w.shape[0]
    pairs = (n + 1) // 2
    # The images interleaved in pairs (uint32 each), 4-byte words allocated as fp32.
    xp = new_output((pairs * h * wd * cin,), torch.float32, x.device)
    gp = new_output((pairs * h * wd * cout,), torch.float32, x.device)
    dw = new_output((3, 3, cin, cout), torch.float32, x.device)
    rc = native.load().conv3x3_wgrad_bf16(x.data_ptr(), g.data_ptr(), dw.data_ptr(),
                                          xp.data_ptr(), gp.data_ptr(), n, h, wd, cin, cout)
    if rc != 0:
        raise RuntimeError("conv3x3_wgrad_bf16 refused its arguments (see cpu_kernels.h)")
    return dw.permute(3, 2, 0, 1).to(w.dtype, memory_format=torch.contiguous_format)


@conv3x3_wgrad.register_fake
def _(x, g, w):
    return torch.empty_like(w, memory_format=torch.contiguous_format)


@torch.library.custom_op("dawnbench::csrc_conv3x3_wgrad_pooled", mutates_args=())
def conv3x3_wgrad_pooled(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """conv3x3_wgrad for a conv whose output feeds a 2x2 / stride-2 max-pool:
    dY then holds at most one nonzero per pool window and channel, and only
    those are summed (fp32 FMAs over x in fp32, csrc/conv_group_wgrad_pooled_cpu.cpp;
    about a quarter of the products). Where dY is not such a gradient the
    kernel says so and the dense kernel runs instead, so the result is always
    dW; the numerics differ from the dense kernel's by the summation order."""
    x, g = _checked(x, g, w)
    n, cin, h, wd = x.shape
    cout = w.shape[0]
    dw = new_output((cout, 3, 3, cin), torch.float32, x.device)
    rc = native.load().conv3x3_wgrad_pooled(x.data_ptr(), g.data_ptr(), 0, dw.data_ptr(), n, h, wd,
                                            cin, cout)
    if rc == 2:  # not a max-pool's gradient
        return conv3x3_wgrad(x, g, w)
    if rc != 0:
        raise RuntimeError("conv3x3_wgrad_pooled refused its arguments (see cpu_kernels.h)")
    return dw.permute(0, 3, 1, 2).to(w.dtype, memory_format=torch.contiguous_format)


@conv3x3_wgrad_pooled.register_fake
def _(x, g, w):
    return torch.empty_like(w, memory_format=torch.contiguous_format)


@torch.library.custom_op("dawnbench::csrc_conv3x3_wgrad_from_pool", mutates_args=())
def conv3x3_wgrad_from_pool(x: torch.Tensor, dp: torch.Tensor, codes: torch.Tensor,
                            w: torch.Tensor) -> torch.Tensor:
    """conv3x3_wgrad_pooled from the pool's own gradient: dp (N, O, H/2, W/2)
    and codes (the same shape, uint8: each window's argmax 0..3, from
    csrc_pool_bn_act_fwd) instead of the full-size dY that scatters dp to the
    codes' places. The same sums in the same order, so the same bits; the
    full-size dY is never written or read (csrc/conv_group.py's ConvPoolBnAct)."""
    n, cin, h, wd = x.shape
    shape = (n, w.shape[0], h // 2, wd // 2)
    if tuple(dp.shape) != shape or tuple(codes.shape) != shape or codes.dtype != torch.uint8:
        raise ValueError(f"conv3x3_wgrad_from_pool: dp {list(dp.shape)} and codes {list(codes.shape)} "
                         f"{codes.dtype} must be uint8 codes and a gradient of shape {list(shape)}")
    if not applies(x, w) or dp.dtype != x.dtype:
        raise ValueError(f"conv3x3_wgrad_from_pool takes bf16 CPU x, dp and w with output channels a "
                         f"multiple of 16 on a CPU with AVX-512 BF16, not x {x.dtype}, dp {dp.dtype}, "
                         f"w {w.dtype} {list(w.shape)}")
    x = x.contiguous(memory_format=torch.channels_last)
    dp, codes = (t.contiguous(memory_format=torch.channels_last) for t in (dp, codes))
    dw = new_output((w.shape[0], 3, 3, cin), torch.float32, x.device)
    rc = native.load().conv3x3_wgrad_pooled(x.data_ptr(), dp.data_ptr(), codes.data_ptr(),
                                            dw.data_ptr(), n, h, wd, cin, w.shape[0])
    if rc != 0:
        raise RuntimeError("conv3x3_wgrad_from_pool refused its arguments (see cpu_kernels.h)")
    return dw.permute(0, 3, 1, 2).to(w.dtype, memory_format=torch.contiguous_format)


@conv3x3_wgrad_from_pool.register_fake
def _(x, dp, codes, w):
    return torch.empty_like(w, memory_format=torch.contiguous_format)


# Where the CPU and OS give AMX tiles, our AMX kernel (csrc/conv_group_wgrad_amx_cpu.cpp) on maps
# of this many pixels or fewer. Interleaved with oneDNN's at batch 1536 (family 6 model 207,
# 2026-11-26; times per round over the forward's of the same shape): 256->256 @7 1.37 against
# 4.17, @3 1.55 against 7.52 (im2col 2.05); at 15x15 even with oneDNN (64->256 2.26 against 2.35),
# at 31x31 slower (2.6 against 1.7): the default stops at 7x7 (amx_preferred).
AMX_KERNEL_MAX_PIXELS = 49


def amx_supported() -> bool:
    """Whether the C++ build in use has the AMX weight gradient and this CPU
    and OS give it AMX tiles (CPUID and Linux's arch_prctl permission)."""
    return _native_says("conv3x3_wgrad_amx_supported", "amx_bf16")


def amx_applies(x: torch.Tensor, w: torch.Tensor) -> bool:
    """The shapes and dtypes the AMX kernel takes (any channel counts)."""
    return _bf16_3x3(x, w) and amx_supported()


def amx_preferred(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Where the default runs the AMX kernel: it applies and the map is small."""
    return x.dim() == 4 and x.shape[2] * x.shape[3] <= AMX_KERNEL_MAX_PIXELS and amx_applies(x, w)


@torch.library.custom_op("dawnbench::csrc_conv3x3_wgrad_amx", mutates_args=())
def conv3x3_wgrad_amx(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """dW of y = conv2d(x, w, padding=1) given dY = g on Intel AMX tiles
    (csrc/conv_group_wgrad_amx_cpu.cpp: one GEMM per tap over the images' rows
    with a zero row and column each; bf16 products summed in fp32, rounded
    once to w's dtype)."""
    x, g = _checked(x, g, w, "conv3x3_wgrad_amx", amx_applies, "on a CPU and OS with AMX tiles")
    n, cin, h, wd = x.shape
    dw = new_output((w.shape[0], 3, 3, cin), torch.float32, x.device)
    rc = native.load().conv3x3_wgrad_amx(x.data_ptr(), g.data_ptr(), dw.data_ptr(), n, h, wd, cin,
                                         w.shape[0])
    if rc != 0:
        raise RuntimeError("conv3x3_wgrad_amx refused its arguments (see cpu_kernels.h)")
    return dw.permute(0, 3, 1, 2).to(w.dtype, memory_format=torch.contiguous_format)


@conv3x3_wgrad_amx.register_fake
def _(x, g, w):
    return torch.empty_like(w, memory_format=torch.contiguous_format)


# The roofline's FLOP/byte formulas of these ops (csrc/conv_group_costs.py), also for FlopCounterMode.
register_flop_formulas(COSTS)
