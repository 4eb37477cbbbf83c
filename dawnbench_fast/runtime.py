"""Where and how a run executes: the device, the CPU threads, the autocast
precision. Shared by every trainer so that ``--device``, ``--threads`` and
``precision`` mean the same everywhere and fail with the same one-line errors.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext

import torch

from dawnbench_fast.overrides import ConfigError


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


def set_threads(n: int) -> None:
    """Use ``n`` CPU threads in PyTorch and numba (0: leave their defaults)."""
    if n > 0:
        torch.set_num_threads(n)
        import numba

        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


def autocast(precision: str, device: torch.device) -> AbstractContextManager:
    """The autocast context of a ``precision`` (bf16, fp16; fp32: none)."""
    if precision == "fp32":
        return nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


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
