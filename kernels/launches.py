"""Launch bookkeeping and configuration shared by every op module of kernels/,
and the Triton backend's availability probe (registered with dispatch here,
once, whichever op module is imported first).

``launch_counts`` counts kernel launches per kernel name so that tests can
assert that the Triton path really ran (no silent fallback to the reference).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import torch

from dawnbench_fast import dispatch

launch_counts: Counter[str] = Counter()


@cache
def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1).
    Read once, as Triton itself reads it when its kernels are decorated (and
    every launch asks: an environment lookup a call was 10% of bn_act's host
    time)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def record(name: str) -> None:
    """Count one launch of the kernel ``name``."""
    launch_counts[name] += 1


def needs_f32_math(dtype: torch.dtype) -> bool:
    """The interpreter has no bf16 arithmetic: bf16 tiles are widened to fp32
    before any arithmetic (and before tl.dot) when interpreting. On a GPU bf16
    feeds the tensor cores directly."""
    return dtype == torch.bfloat16 and interpreting()


_poison = False


def new_output(shape, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """Allocate a kernel output. Under :func:`poisoned_outputs` it is filled
    with NaN (floats) or 77 (integers) so that tests catch any element a
    kernel forgets to write."""
    t = torch.empty(shape, dtype=dtype, device=device)
    if _poison:
        t.fill_(float("nan") if dtype.is_floating_point else 77)
    return t


@contextmanager
def poisoned_outputs() -> Iterator[None]:
    """Test helper: every kernel output allocated inside is pre-poisoned."""
    global _poison
    old, _poison = _poison, True
    try:
        yield
    finally:
        _poison = old


# -- launch configuration shared by the op modules ---------------------------
# None: follow torch.use_deterministic_algorithms(); True/False: force.
DETERMINISTIC_STATS: bool | None = None
# The interpreter runs fewer, larger programs faster; tests lower this to
# exercise tile edges.
INTERPRETER_ROWS = 512
# 64 x 64 tiles with 8 warps (16 elements per thread): no spills in any of
# the element-wise and reduction kernels for sm_80 or sm_90; 4 warps spill in
# the backward kernels.
EW_WARPS = 8


def deterministic_stats() -> bool:
    """Per-tile partials instead of atomics for the conv kernels' BN statistics
    and weight gradients? (bn_act's own statistics are always partials.)"""
    if DETERMINISTIC_STATS is not None:
        return DETERMINISTIC_STATS
    return torch.are_deterministic_algorithms_enabled()


def dot_precision(dtype: torch.dtype, conv: bool) -> str:
    """fp32 operands use TF32 on a GPU exactly when PyTorch's own flag allows it
    for the matching op, so --kernels triton and torch agree on precision."""
    if dtype != torch.float32 or interpreting():
        return "ieee"
    allowed = torch.backends.cudnn.allow_tf32 if conv else torch.backends.cuda.matmul.allow_tf32
    return "tf32" if allowed else "ieee"


def ew_rows() -> int:
    """Rows per tile of the element-wise and reduction kernels."""
    return INTERPRETER_ROWS if interpreting() else 64


def cdiv(a: int, b: int) -> int:
    """ceil(a / b), as cdiv (Triton itself is not imported here: importing
    the package stays cheap)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (n >= 1), as triton.next_power_of_2."""
    return 1 << (max(n, 1) - 1).bit_length()


def block_c(c: int) -> int:
    """Channels per tile of the element-wise and reduction kernels."""
    return min(64, next_power_of_2(c))


# Programs over the rows of the row-chunked reductions (each writes one row of
# partials that a finalize kernel sums): enough to fill a GPU.
REDUCTION_PROGRAMS = 512


def reduction_programs(rows: int, block_r: int) -> tuple[int, int]:
    """(programs, rows per program) for the row-chunked reductions: up to
    REDUCTION_PROGRAMS, few in the interpreter (each costs Python time)."""
    target = 2 if interpreting() else REDUCTION_PROGRAMS
    blocks = cdiv(rows, block_r)
    progs = max(1, min(blocks, target))
    per = cdiv(blocks, progs) * block_r
    return cdiv(rows, per), per


def nhwc(x: torch.Tensor) -> torch.Tensor:
    """NCHW-shaped tensor -> contiguous NHWC (free for channels_last input)."""
    return x.permute(0, 2, 3, 1).contiguous()


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype autocast would compute in on x's device, else x's own."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def probe(device: torch.device) -> str | None:
    """dispatch probe of backend ``triton``: None if usable, else one line."""
    if device.type == "cuda":
        return None if torch.cuda.is_available() else "no CUDA device is visible"
    if device.type == "cpu" and interpreting():
        return None
    return (f"Triton kernels need a CUDA device, not {device.type} "
            "(TRITON_INTERPRET=1 runs them, slowly, in the CPU interpreter)")


dispatch.register_probe("triton", probe)
