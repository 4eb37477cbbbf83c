"""The .cu sources as one NVRTC program: what CuPy's RawModule compiles at run
time and what the NVRTC test compiles ahead of time, defined once here.

The kernels include no CUDA header (16-bit floats are bit patterns, the tensor
core is reached through inline PTX), so NVRTC needs nothing but this folder on
its include path.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
CUDA_SOURCES = ("bn_act.cu", "augment.cu", "gemm_mma.cu", "bias_act.cu")

# Kernels launched by name (extern "C", so no mangling), per source file.
KERNELS = {
    "bn_act.cu": [
        f"{k}_{dt}"
        for k in ("bn_stats_partial", "bn_bwd_partial", "bn_act_fwd", "bn_bwd_dx", "bn_shift_first",
                  "bn_stats_partial_vec", "bn_bwd_partial_vec", "bn_act_fwd_vec", "bn_bwd_dx_vec")
        for dt in ("f32", "bf16", "f16")
    ]
    + ["bn_stats_finalize", "bn_bwd_finalize"],
    "augment.cu": [f"augment_crop_flip_{dt}" for dt in ("f32", "bf16", "f16")],
    "gemm_mma.cu": ["gemm_mma_f16", "gemm_mma_bf16"],
    "bias_act.cu": [f"bias_act_{k}_{dt}" for k in ("fwd", "bwd") for dt in ("f32", "bf16", "f16")]
    + ["bias_act_dbias_finalize"],
}


def nvrtc_program() -> str:
    """One translation unit that includes every .cu file."""
    return "".join(f'#include "{name}"\n' for name in CUDA_SOURCES)


def nvrtc_options() -> tuple[str, ...]:
    """Options for NVRTC (the architecture is added by the caller / CuPy)."""
    return ("-std=c++17", f"-I{HERE}")
