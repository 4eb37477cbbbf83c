"""Which engine runs our C++ kernels here, and what every launch needs.

On a CUDA tensor a kernel runs through the built extension
``dawnbench_fast._C`` when it was built with CUDA and sees a device, else
through CuPy/NVRTC (csrc/cupy_path.py), else the ``cuda`` backend is refused
with one line naming both reasons (:func:`cuda_engine`). On a CPU tensor it
runs the CPU (OpenMP) build of the same math: the copy of ``_C``'s CPU
kernels that this CPU runs (:func:`cpu_path`). This module holds both
backends' probes (``cuda``: a device and an engine; ``cpu``: the C++ build,
and one whose AVX-512 this CPU has), and the helpers of every op module here
(csrc/bn_act.py, augment.py, gemm.py, conv_group_wgrad.py, bias_act.py): dtype codes,
output allocation, raw pointers and the current stream.

Without the C++ build (``dawnbench_fast._C`` neither importable nor
buildable) the cpu probe refuses the backend with a one-line reason:
``--kernels cpu`` means our kernels, and numba plus the reference in their
place would be a silent fallback.
"""

from __future__ import annotations

import platform

import numpy as np
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import cupy_path, native
from dawnbench_fast.hardware.machine import cpu_flags

DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
DTYPE_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
NVTX_DOMAIN = "dawnbench"


# --------------------------------------------------------------------------
# CUDA: the built extension, else CuPy.
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


def cuda_probe(device: torch.device) -> str | None:
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


# --------------------------------------------------------------------------
# CPU: the C++ build's copy for this CPU.
# --------------------------------------------------------------------------
_AVX512 = ("avx512f", "avx512bw", "avx512vl")  # what bn_act_vec.h's DBF_VEC forms need


def build_isa_reason(path: str, vectorised: bool, flags: set[str], machine: str) -> str | None:
    """None if the C++ build's CPU ``path`` in use, whose AVX-512 loops are
    ``vectorised`` (or not), can run on a CPU with these /proc/cpuinfo
    ``flags``, else why not (one line).

    The portable build ("baseline" and "avx512" copies) chose its path at
    import from the CPU's own features (bindings.cpp), so it is never refused.
    A ``march`` build (DAWNBENCH_MARCH=native, say) made on another machine
    (a shared cache or installed tree) may hold AVX-512 instructions this CPU
    lacks: they would kill the process with SIGILL on the first kernel call,
    so the backend is refused and ``auto`` takes torch. ATEN_CPU_CAPABILITY
    does not enter: it narrows ATen's kernels only, and ours run on the CPU's
    real AVX-512 as fast as before (their numerics do not depend on it).
    Unknown flags (no /proc/cpuinfo) are not held against the build."""
    if path != "march" or not vectorised or machine.lower() not in ("x86_64", "amd64") or not flags:
        return None
    missing = [f for f in _AVX512 if f not in flags]
    if not missing:
        return None
    return (f"dawnbench_fast._C was built with -march={_march()} (AVX-512) but this CPU lacks "
            f"{', '.join(missing)} (a build from another machine?); rebuild it here with "
            "`pip install -e .` (portable unless DAWNBENCH_MARCH is set)")


def _march() -> str:
    try:
        return native.load().cpu_march or "?"
    except native.NativeUnavailable:
        return "?"


def cpu_path() -> str | None:
    """The copy of the C++ CPU kernels in use ("avx512", "baseline", or
    "march" for a DAWNBENCH_MARCH build), None without the build: run.json
    records it beside the other kernel choices."""
    if native.unavailable_reason() is not None:
        return None
    return native.load().cpu_path()


def cpu_probe(device: torch.device) -> str | None:
    """dispatch probe of backend ``cpu``: None if usable, else one line."""
    if device.type != "cpu":
        return f"the cpu kernels run on the CPU, not on {device}; use --device cpu"
    reason = native.unavailable_reason()  # looked up now, so tests can simulate a missing build
    if reason is not None:
        return reason
    mod = native.load()
    return build_isa_reason(mod.cpu_path(), mod.nhwc_kernels_vectorised(), cpu_flags(),
                            platform.machine())


dispatch.register_probe("cuda", cuda_probe)
dispatch.register_probe("cpu", cpu_probe)


# --------------------------------------------------------------------------
# Launch helpers.
# --------------------------------------------------------------------------
_NP_OF = {torch.float32: np.float32, torch.bfloat16: np.int16, torch.float16: np.float16}


def new_output(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
               channels_last: bool = False) -> torch.Tensor:
    """An uninitialised output. On the CPU it is allocated through NumPy, which
    asks the kernel for huge pages on large arrays: first-touch page faults
    otherwise cost more than the kernels themselves (measured: 10k-image augment
    9-23 ms into a reused buffer, 44 ms into a fresh torch.empty)."""
    if device.type != "cpu" or dtype not in _NP_OF:  # allocated in its layout: no copy of garbage
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        return torch.empty(shape, dtype=dtype, device=device, memory_format=fmt)
    if channels_last:  # physical NHWC, viewed as NCHW
        n, c, h, w = shape
        base = torch.from_numpy(np.empty((n, h, w, c), dtype=_NP_OF[dtype]))
        return base.view(dtype).permute(0, 3, 1, 2)
    return torch.from_numpy(np.empty(shape, dtype=_NP_OF[dtype])).view(dtype)


def stream_ptr() -> int:
    """The current CUDA stream, as the extension's launchers take it."""
    return torch.cuda.current_stream().cuda_stream


def ptr(t: torch.Tensor | None) -> int:
    """A tensor's data pointer, 0 for None (an absent optional operand)."""
    return 0 if t is None else t.data_ptr()


def layout(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(x dense in NCHW or NHWC memory, channels_last flag)."""
    if x.is_contiguous():
        return x, 0
    if x.is_contiguous(memory_format=torch.channels_last):
        return x, 1
    return x.contiguous(), 0


def partitions(m: int, c: int, cl: int, tiled: bool = False) -> int:
    """Row partitions of the GPU partial-sum kernels. Scalar kernels: about 1k
    blocks in all, each with at least 2k rows of work. Tiled (bn_act.cu's
    *_vec kernels, one block a partition): at least TILE_ELEMENTS elements a
    block and at most TILE_PARTITIONS_MAX blocks, so the finalize's loop over
    partitions stays short (tools/gpu_suite/sweep_bn_act.py tunes both)."""
    if tiled:
        return max(1, min(-(-m * c // TILE_ELEMENTS), TILE_PARTITIONS_MAX))
    blocks_per_part = (c + 31) // 32 if cl else c
    return max(1, min((m + 2047) // 2048, max(1, 1024 // blocks_per_part)))


# The tiled partial kernels' partitions: 4 blocks of 256 threads on each of
# an H100's 132 SMs, each block at least 32k elements.
TILE_PARTITIONS_MAX = 528
TILE_ELEMENTS = 32768


def tile_lanes(c: int, dtype: torch.dtype, cl: int, *tensors: torch.Tensor) -> int:
    """Vector lanes of bn_act.cu's tiled kernels for C channels of ``dtype``
    in channels_last, or 0 where the scalar kernels run: the same rule as
    bn_act_tile.cuh's tile_lanes and the launcher's alignment check (16-byte
    vectors of C / lanes channels, lanes a power of two up to 256);
    tests/ops/test_bn_act_tile.py checks the two agree."""
    vec = 16 // dtype.itemsize
    if not cl or c <= 0 or c % vec or any(t.data_ptr() % 16 for t in tensors):
        return 0
    lanes = c // vec
    return lanes if lanes <= 256 and lanes & (lanes - 1) == 0 else 0
