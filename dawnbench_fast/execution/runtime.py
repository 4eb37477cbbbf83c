"""Where and how a run executes: the device, the CPU threads, the autocast
precision. Shared by every trainer so that ``--device``, ``--threads`` and
``precision`` mean the same everywhere and fail with the same one-line errors.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from contextlib import AbstractContextManager, nullcontext

import torch

from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.config.precision import resolve_precision


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; anything this machine cannot
    run is a ConfigError naming ``--device``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"--device {name}: not a device name (use auto, cpu or cuda)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: CUDA is not available here; use --device cpu")
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"--device {name}: only cpu and cuda are supported")
    return dev


# Steps between two reads of device values on the host (the divergence record,
# the progress bar's loss) on a GPU, where each read makes the host wait.
FINITE_CHECK_EVERY = 32


def synchronizes(device: torch.device) -> bool:
    """Whether ``device`` runs asynchronously from the host, so that reading a
    result (or a clock) there means waiting for it: CUDA; the CPU runs in line."""
    return device.type == "cuda"


def host_read_every(device: torch.device) -> int:
    """Steps between the training loop's reads of device values on the host:
    every step where a read costs nothing (the CPU), every
    :data:`FINITE_CHECK_EVERY` where it makes the host wait for the device."""
    return FINITE_CHECK_EVERY if synchronizes(device) else 1


def set_threads(n: int) -> None:
    """Use ``n`` CPU threads in PyTorch and numba (0: leave their defaults)."""
    if n > 0:
        torch.set_num_threads(n)
        import numba

        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


def configure_process(threads: int) -> None:
    """A trainer's process set-up: ``threads`` (:func:`set_threads`) and the
    allocator (:func:`keep_freed_memory`)."""
    set_threads(threads)
    keep_freed_memory()


# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_MALLOC_MODE = ["system"]  # what keep_freed_memory did in this process (run.json)


def malloc_mode() -> str:
    """``heap`` once :func:`keep_freed_memory` took effect, else ``system[ (why)]``."""
    return _MALLOC_MODE[0]


def keep_freed_memory() -> str:
    """Make glibc's malloc serve every allocation from its heap and keep what
    is freed, so that a training step's large activations reuse pages that are
    already mapped instead of being mmapped, page-faulted in and unmapped
    again on every step (on a 2-core EPYC the CIFAR step at batch 2000 took
    4.85-4.98 s with malloc's defaults against 3.58-3.72 s, and a fresh 230 MB
    tensor 73 ms to zero against 10 ms; docs/PERFORMANCE.md). This is what the usual advice
    to preload jemalloc or TCMalloc for PyTorch CPU training buys, without a
    native dependency. The process keeps its peak footprint until it exits.
    The heap settles within a few steps, not at once: glibc 2.36's
    posix_memalign (torch aligns to 64 bytes) asks for a little more than a
    freed block of the same size holds, so the first steps still grow it.

    Returns what was done (also :func:`malloc_mode`, run.json's ``malloc``):
    ``"heap"``, or ``"system"`` (``DAWNBENCH_MALLOC=system`` asked to leave
    malloc alone) or ``"system (<why>)"`` (not glibc, mallopt refused)."""
    _MALLOC_MODE[0] = _keep_freed_memory()
    return _MALLOC_MODE[0]


def _keep_freed_memory() -> str:
    if os.environ.get("DAWNBENCH_MALLOC", "heap") == "system":
        return "system"
    if not sys.platform.startswith("linux"):
        return "system (not glibc)"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018  (musl and others have no such symbol)
    except (OSError, AttributeError):
        return "system (not glibc)"
    ok = libc.mallopt(_M_MMAP_MAX, 0) == 1
    ok &= libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(2**31 - 1)) == 1
    return "heap" if ok else "system (mallopt refused)"


def compute_dtype(precision: str, device: torch.device) -> torch.dtype:
    """The dtype ``precision`` (fp32, bf16, fp16; auto: as resolved for
    ``device``) computes in on ``device``: the one its autocast casts
    matmuls and convolutions to."""
    if precision == "auto":
        precision = resolve_precision(precision, device).precision
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def autocast(precision: str, device: torch.device) -> AbstractContextManager:
    """The autocast context of a ``precision`` (bf16, fp16; fp32: none; auto:
    what :func:`dawnbench_fast.config.precision.resolve_precision` picks for ``device``,
    for callers such as scripts that did not resolve their config first)."""
    dtype = compute_dtype(precision, device)
    return nullcontext() if dtype == torch.float32 else torch.autocast(device.type, dtype=dtype)


def set_deterministic(on: bool) -> None:
    """``--deterministic``: PyTorch's deterministic algorithms everywhere (an
    op without one raises instead of running a nondeterministic kernel), cuDNN
    without benchmarking, cuBLAS with a fixed workspace, and our Triton BN
    statistics as per-tile partials instead of float atomics (they follow
    ``torch.are_deterministic_algorithms_enabled()``). Kernel choices that a
    recipe times at warm-up are frozen by the recipe itself."""
    if not on:
        return
    # cuBLAS needs this before its first call to be deterministic on CUDA >= 10.2.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
