"""The no-build CUDA path: CuPy's RawModule compiles the same .cu files through
NVRTC at run time (cached by CuPy) and launches them on torch tensors, which
are handed over zero-copy through DLPack. So a plain ``pip install`` on a GPU
machine (with the ``cuda`` extra) gets our CUDA kernels without nvcc.

Launch geometry matches the nvcc build's host launchers (bn_act.cu etc.): one
function per op below, mirroring the launcher at the bottom of its .cu file.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

from dawnbench_fast.csrc import sources

# Channels a block of the finalize kernels (bn_act.cu's DBF_FINALIZE_CHANNELS: one warp each)
FINALIZE_CHANNELS = 8
INSTALL_HINT = "pip install 'dawnbench-fast[cuda]' installs cupy-cuda13x; use cupy-cuda12x on CUDA 12"


def unavailable_reason() -> str | None:
    """None if CuPy can launch kernels here, else why not (one line)."""
    try:
        import cupy
    except ImportError:
        return f"CuPy is not installed: {INSTALL_HINT}"
    except Exception as e:  # a broken CuPy install raises all sorts
        return f"CuPy failed to import ({type(e).__name__}: {e})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return f"CuPy found no usable CUDA device ({type(e).__name__}: {str(e).strip()})"
    if n < 1:
        return "CuPy found no CUDA device"
    return None


@cache
def module() -> Any:
    """The compiled RawModule (NVRTC, for the current device's architecture)."""
    import cupy

    return cupy.RawModule(code=sources.nvrtc_program(), options=sources.nvrtc_options())


def _arr(t: torch.Tensor) -> Any:
    """Zero-copy CuPy view of a CUDA tensor. bf16 has no CuPy dtype, so 16-bit
    floats travel as int16 (the kernels read raw bits anyway)."""
    import cupy

    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return cupy.from_dlpack(t.detach())


def _stream() -> Any:
    import cupy

    return cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)


def _blocks(total: int) -> int:
    return max(1, min((total + 255) // 256, 8192))


def launch(name: str, grid: tuple[int, ...], block: tuple[int, ...], args: tuple) -> None:
    """Launch kernel ``name`` with tensors converted and scalars typed."""
    import numpy as np

    conv = []
    for a in args:
        if isinstance(a, torch.Tensor):
            conv.append(_arr(a))
        elif a is None:
            conv.append(np.uint64(0))  # null pointer
        else:
            conv.append(a)
    # RawKernel launches on CuPy's current stream: make torch's current one it.
    with _stream():
        module().get_function(name)(grid, block, tuple(conv))


# bn_act: the same launches as bn_act.cu's host launchers; ``lanes`` > 0
# (engine.tile_lanes) takes the tiled *_vec kernels, one 256-thread block a partition.
def bn_act_forward(dt: str, x, y, stats, weight, bias, rm, rv, partial, shift_k, P: int, N: int,
                   C: int, HW: int, cl: int, training: int, eps: float, momentum: float,
                   act: int, lanes: int = 0) -> None:
    import numpy as np

    i32, f32, i64 = np.int32, np.float32, np.int64
    if training and lanes:
        launch(f"bn_stats_partial_vec_{dt}", (P,), (256,),
               (x, i64(N * HW), i32(C), i32(P), partial, shift_k))
    elif training:
        launch(f"bn_shift_first_{dt}", ((C + 127) // 128,), (128,),
               (x, i32(C), i32(HW), i32(cl), shift_k))
        grid = ((C + 31) // 32, P) if cl else (C, P)
        block = (32, 8) if cl else (256,)
        launch(f"bn_stats_partial_{dt}", grid, block,
               (x, i32(N), i32(C), i32(HW), i32(cl), i32(P), partial))
    launch("bn_stats_finalize", (-(-C // FINALIZE_CHANNELS),), (256,),
           (partial, shift_k, i32(P), i32(C), i64(N * HW), weight, bias, f32(eps),
            f32(momentum), i32(training), rm, rv, stats))
    total = N * C * HW
    if lanes:
        nvec = total // (C // lanes)
        launch(f"bn_act_fwd_vec_{dt}", (_blocks(nvec),), (256,),
               (x, y, stats, i64(nvec), i32(C), i32(act)))
    else:
        launch(f"bn_act_fwd_{dt}", (_blocks(total),), (256,),
               (x, y, stats, i64(total), i32(C), i32(1 if cl else HW), i32(act)))


def bn_act_backward(dt: str, x, dy, dx, stats, dweight, dbias, partial, coef, P: int, N: int,
                    C: int, HW: int, cl: int, training: int, act: int, lanes: int = 0) -> None:
    import numpy as np

    i32, i64 = np.int32, np.int64
    if lanes:
        launch(f"bn_bwd_partial_vec_{dt}", (P,), (256,),
               (x, dy, stats, i32(act), i64(N * HW), i32(C), i32(P), partial))
    else:
        grid = ((C + 31) // 32, P) if cl else (C, P)
        block = (32, 8) if cl else (256,)
        launch(f"bn_bwd_partial_{dt}", grid, block,
               (x, dy, stats, i32(act), i32(N), i32(C), i32(HW), i32(cl), i32(P), partial))
    launch("bn_bwd_finalize", (-(-C // FINALIZE_CHANNELS),), (256,),
           (partial, i32(P), i32(C), i64(N * HW), stats, i32(training), coef, dweight,
            dbias))
    total = N * C * HW
    if lanes:
        nvec = total // (C // lanes)
        launch(f"bn_bwd_dx_vec_{dt}", (_blocks(nvec),), (256,),
               (x, dy, dx, stats, coef, i64(nvec), i32(C), i32(act)))
    else:
        launch(f"bn_bwd_dx_{dt}", (_blocks(total),), (256,),
               (x, dy, dx, stats, coef, i64(total), i32(C), i32(1 if cl else HW), i32(act)))


def augment(dt: str, padded, indices, params, scale, shift, out, B: int, ph: int, pw: int,
            C: int, size: int, cutout: int) -> None:
    import numpy as np

    i32 = np.int32
    launch(f"augment_crop_flip_{dt}", (_blocks(B * size * size * C),), (256,),
           (padded, indices, params, scale, shift, out, i32(B), i32(ph), i32(pw), i32(C),
            i32(size), i32(cutout)))


def gemm(dt: str, a, b, c, M: int, N: int, K: int, lda: int, ldb: int, ldc: int) -> None:
    import numpy as np

    i32 = np.int32
    launch(f"gemm_mma_{dt}", ((N + 63) // 64, (M + 63) // 64), (128,),
           (a, b, c, i32(M), i32(N), i32(K), i32(lda), i32(ldb), i32(ldc)))


def bias_act_forward(dt: str, x, bias, y, total: int, C: int, inner: int, act: int) -> None:
    import numpy as np

    i32 = np.int32
    launch(f"bias_act_fwd_{dt}", (_blocks(total),), (256,),
           (x, bias, y, np.int64(total), i32(C), i32(inner), i32(act)))


def bias_act_backward(dt: str, x, dy, bias, dx, dbias, partial, P: int, N: int, C: int, HW: int,
                      cl: int, act: int) -> None:
    import numpy as np

    i32 = np.int32
    grid = ((C + 31) // 32, P) if cl else (C, P)
    block = (32, 8) if cl else (256,)
    launch(f"bias_act_bwd_{dt}", grid, block,
           (x, dy, bias, dx, i32(act), i32(N), i32(C), i32(HW), i32(cl), i32(P), partial))
    launch("bias_act_dbias_finalize", ((C + 127) // 128,), (128,), (partial, i32(P), i32(C), dbias))
