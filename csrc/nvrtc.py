"""Compile CUDA source with NVRTC through ctypes, no GPU needed. This is what
CuPy's RawModule does at run time; tests use it to check the .cu files under
NVRTC ahead of time (the ``nvidia-cuda-nvrtc`` wheel carries the library)."""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from dataclasses import dataclass
from functools import cache

# Where the NVIDIA wheels and toolkits put libnvrtc, newest CUDA first.
_PATTERNS = (
    "nvidia/cu13/lib/libnvrtc.so.13*",
    "nvidia/cuda_nvrtc/lib/libnvrtc.so.12*",
    "nvidia/cu12/lib/libnvrtc.so.12*",
)


class NvrtcUnavailable(RuntimeError):
    """No NVRTC library could be loaded."""


class NvrtcError(RuntimeError):
    """The program did not compile; the message holds NVRTC's log."""


@dataclass
class NvrtcResult:
    arch: str
    binary: bytes  # cubin for sm_XX, PTX for compute_XX
    log: str


@cache
def library() -> ctypes.CDLL:
    """Load libnvrtc from the Python environment's NVIDIA wheels, else the toolkit."""
    candidates: list[str] = []
    for base in sys.path:
        for pat in _PATTERNS:
            candidates += sorted(glob.glob(os.path.join(base, pat)))
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            candidates += sorted(glob.glob(os.path.join(root, "lib64", "libnvrtc.so*")))
    candidates += ["libnvrtc.so"]
    errors = []
    for path in candidates:
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
    raise NvrtcUnavailable(
        "libnvrtc not found; `pip install nvidia-cuda-nvrtc` provides it (no GPU needed)"
    )


def version() -> tuple[int, int]:
    lib = library()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def _check(lib: ctypes.CDLL, status: int, what: str) -> None:
    if status != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise NvrtcError(f"{what}: {lib.nvrtcGetErrorString(status).decode()}")


def compile_program(source: str, arch: str, options: tuple[str, ...] = (),
                    name: str = "dawnbench.cu") -> NvrtcResult:
    """Compile ``source`` for ``arch`` ("sm_80", "sm_90a" -> cubin; "compute_80" -> PTX).

    Raises NvrtcError with the compiler log when compilation fails."""
    lib = library()
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0,
                                       None, None), "nvrtcCreateProgram")
    try:
        opts = [*options, f"--gpu-architecture={arch}"]
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        status = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if status != 0:
            raise NvrtcError(f"NVRTC failed for {arch}:\n{log}")
        cubin = arch.startswith("sm_")
        get_size = lib.nvrtcGetCUBINSize if cubin else lib.nvrtcGetPTXSize
        get = lib.nvrtcGetCUBIN if cubin else lib.nvrtcGetPTX
        _check(lib, get_size(prog, ctypes.byref(size)), "get size")
        out = ctypes.create_string_buffer(size.value)
        _check(lib, get(prog, out), "get binary")
        return NvrtcResult(arch, out.raw, log)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
