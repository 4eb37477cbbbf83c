"""Ahead-of-time compilation of every Triton kernel for real GPUs, without one.

Each :class:`KernelSpec` names a kernel and one launch configuration the
backend uses (dtypes, constexprs, warps, stages). :func:`compile_spec` runs
``triton.compile`` for a ``GPUTarget`` and reads the resources: shared memory
from Triton's metadata, registers and spills from ``ptxas -v`` on the PTX.

``triton.compile`` does not work while TRITON_INTERPRET=1 is set: run this in
a process without it (tests/ops/test_triton_aot.py does so in a subprocess).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from dawnbench_fast.kernels.augment import augment_kernel
from dawnbench_fast.kernels.bias_act import bias_act_bwd_kernel, bias_act_fwd_kernel
from dawnbench_fast.kernels.bn_act import (
    FINALIZE_WARPS,
    affine_act_kernel,
    bn_act_bwd_apply_kernel,
    bn_act_bwd_reduce_kernel,
    bn_bwd_coef_kernel,
    bn_finalize_kernel,
    channel_stats_kernel,
    finalize_tile,
)
from dawnbench_fast.kernels.bn_act import WARPS as BN_ACT_WARPS  # beside launches.EW_WARPS
from dawnbench_fast.kernels.conv_group import FUSED_PROLOGUE, conv_blocks, wgrad_blocks
from dawnbench_fast.kernels.conv_group_conv3x3 import conv3x3_fwd_kernel
from dawnbench_fast.kernels.conv_group_wgrad import conv3x3_wgrad_kernel
from dawnbench_fast.kernels.gemm_kernel import gemm_configs, gemm_kernel
from dawnbench_fast.kernels.launches import REDUCTION_PROGRAMS
from dawnbench_fast.vocabulary import activation

TARGETS = {"sm_80": GPUTarget("cuda", 80, 32), "sm_90": GPUTarget("cuda", 90, 32)}


@dataclass
class KernelSpec:
    """One compiled variant: ``ptrs`` maps pointer args to Triton dtypes
    (fp16, bf16, fp32, i8, u8, i32, i64), ``floats`` are fp32 scalars, every
    other runtime argument is i32."""

    name: str
    kernel: Any
    ptrs: dict[str, str]
    constexprs: dict[str, Any]
    floats: tuple[str, ...] = ()
    num_warps: int = 4
    num_stages: int = 3
    extra: dict[str, Any] = field(default_factory=dict)
    # i32 arguments that are multiples of 16 at the recipe's shapes: a launch
    # specialises them (and every 16-byte aligned pointer) as divisible by 16,
    # which is what lets loads and stores vectorise; without it the compile
    # would be of a kernel no launch runs.
    aligned: tuple[str, ...] = ()

    def signature(self) -> dict[str, str]:
        sig = {}
        for arg in self.kernel.arg_names:
            if arg in self.constexprs:
                sig[arg] = "constexpr"
            elif arg in self.ptrs:
                sig[arg] = "*" + self.ptrs[arg]
            elif arg in self.floats:
                sig[arg] = "fp32"
            else:
                sig[arg] = "i32"
        return sig

    def attrs(self) -> dict[tuple[int], list]:
        """Triton's specialisation attributes as a launch sets them: every
        pointer (torch's allocations are 16-byte aligned) and the ``aligned``
        integers divisible by 16."""
        return {(i,): [["tt.divisibility", 16]] for i, arg in enumerate(self.kernel.arg_names)
                if arg in self.ptrs or arg in self.aligned}

    def config_label(self) -> str:
        keys = [k for k in self.constexprs if k.startswith("BLOCK") or k == "GROUP_M"]
        tiles = "x".join(str(self.constexprs[k]) for k in keys)
        return f"{tiles} w{self.num_warps} s{self.num_stages}"


# The activations the trainers launch, by name: the default recipe's conv groups (SiLU,
# cifar/recipe.py's ``act``) and its whitening conv's and the published recipe's (GELU).
# tests/ops/test_triton_aot.py checks that the recipe's choices are here.
ACTS: tuple[str, ...] = ("silu", "gelu")


def _rc(act: str, block_r: int = 64, block_c: int = 64) -> dict[str, Any]:
    return {"ACT": activation(act).code, "BLOCK_R": block_r, "BLOCK_C": block_c}


def _elementwise_specs() -> list[KernelSpec]:
    """The augmentation (uint8 to bf16), and bias_act in both layouts (bf16) with each of ACTS."""
    out = [KernelSpec("augment[u8->bf16]", augment_kernel,
                      {"padded_ptr": "u8", "idx_ptr": "i64", "ox_ptr": "i32", "oy_ptr": "i32",
                       "flip_ptr": "i32", "cutx_ptr": "i32", "cuty_ptr": "i32",
                       "scale_ptr": "fp32", "shift_ptr": "fp32", "out_ptr": "bf16"},
                      {"SIZE": 32, "C": 3, "BLOCK": 4096}, num_warps=8)]
    for act in ACTS:
        for cl in (True, False):  # channels_last as the model's activations; NCHW
            fmt = "nhwc" if cl else "nchw"
            code = activation(act).code
            out.append(KernelSpec(f"bias_act_fwd[bf16,{act},{fmt}]", bias_act_fwd_kernel,
                                  {"x_ptr": "bf16", "bias_ptr": "fp32", "y_ptr": "bf16"},
                                  {"ACT": code, "CL": cl, "BLOCK_R": 64, "BLOCK_K": 64}, num_warps=8))
            out.append(KernelSpec(f"bias_act_bwd[bf16,{act},{fmt}]", bias_act_bwd_kernel,
                                  {"dy_ptr": "bf16", "x_ptr": "bf16", "bias_ptr": "fp32", "dx_ptr": "bf16",
                                   "part_ptr": "fp32"},
                                  {"ACT": code, "CL": cl, "BLOCK_R": 64, "BLOCK_K": 64}, num_warps=8))
    return out


# bn_act's integers at the recipe's shapes (batch 1536, 64 or 256 channels): rows,
# channels, rows a program and partial rows are all multiples of 16.
BN_ALIGNED = ("R", "C", "P", "rows_per_prog")


def _bn_act_specs() -> list[KernelSpec]:
    """bn_act's statistics, finalize, coefficient, apply and backward kernels (bf16; those
    that apply an activation with each of ACTS); the finalize tiles for the reductions'
    partial tables at 64 channels."""
    out: list[KernelSpec] = []
    bp, bc = finalize_tile(64, REDUCTION_PROGRAMS)
    for atomic in (True, False):
        out.append(KernelSpec(f"channel_stats[bf16,{'atomic' if atomic else 'partials'}]",
                              channel_stats_kernel,
                              {"x_ptr": "bf16", "psum_ptr": "fp32", "psumsq_ptr": "fp32"},
                              {"ATOMIC": atomic, "BLOCK_R": 64, "BLOCK_C": 64}, num_warps=BN_ACT_WARPS,
                              aligned=BN_ALIGNED))
    out.append(KernelSpec("bn_finalize", bn_finalize_kernel,
                          dict.fromkeys(("psum_ptr", "psumsq_ptr", "weight_ptr", "bias_ptr",
                                         "rmean_ptr", "rvar_ptr", "mean_ptr", "invstd_ptr",
                                         "scale_ptr", "shift_ptr"), "fp32"),
                          {"TRAINING": True, "UPDATE_RUNNING": True, "BLOCK_P": bp, "BLOCK_C": bc},
                          floats=("count", "momentum", "eps", "unbias"), num_warps=FINALIZE_WARPS,
                          aligned=BN_ALIGNED))
    out.append(KernelSpec("bn_bwd_coef", bn_bwd_coef_kernel,
                          dict.fromkeys(("pg_ptr", "pgx_ptr", "mean_ptr", "invstd_ptr", "scale_ptr",
                                         "dweight_ptr", "dbias_ptr", "a_ptr", "b_ptr"), "fp32"),
                          {"TRAINING": True, "BLOCK_P": bp, "BLOCK_C": bc}, floats=("count",),
                          num_warps=FINALIZE_WARPS, aligned=BN_ALIGNED))
    for act in ACTS:
        out.append(KernelSpec(f"affine_act[bf16,{act}]", affine_act_kernel,
                              {"x_ptr": "bf16", "scale_ptr": "fp32", "shift_ptr": "fp32",
                               "y_ptr": "bf16"}, _rc(act), num_warps=BN_ACT_WARPS, aligned=BN_ALIGNED))
        out.append(KernelSpec(f"bn_act_bwd_reduce[bf16,{act}]", bn_act_bwd_reduce_kernel,
                              {"dy_ptr": "bf16", "x_ptr": "bf16", "scale_ptr": "fp32",
                               "shift_ptr": "fp32", "pg_ptr": "fp32", "pgx_ptr": "fp32"},
                              _rc(act), num_warps=BN_ACT_WARPS, aligned=BN_ALIGNED))
        for pool in (False, True):
            out.append(KernelSpec(f"bn_act_bwd_apply[bf16,{act}{',pool' if pool else ''}]",
                                  bn_act_bwd_apply_kernel,
                                  {"dy_ptr": "bf16", "x_ptr": "bf16", "scale_ptr": "fp32",
                                   "shift_ptr": "fp32", "a_ptr": "fp32", "b_ptr": "fp32",
                                   "idx_ptr": "i8", "dx_ptr": "bf16"},
                                  {"POOL": pool, **_rc(act)}, num_warps=BN_ACT_WARPS, aligned=BN_ALIGNED))
    return out


def _acts(prologue: bool) -> tuple[str, ...]:
    """The conv kernels apply ACT only in their BN+act prologue: without it one
    compile (ACTS[0]'s code, unused) stands for every activation."""
    return ACTS if prologue else ACTS[:1]


def _conv_aligned(cin: int) -> tuple[str, ...]:
    """The conv kernels' integers divisible by 16 at the recipe's shapes: the
    batch (1536) and output channels (64, 256), the input channels but for 24;
    the image sides (31, 15, 7 px) are odd."""
    return ("NB", "COUT", *(("CIN",) if cin % 16 == 0 else ()))


def specs(one_per_kernel: bool = False) -> list[KernelSpec]:
    """The variants the model and the trainer launch (widths 64/256/256, bf16,
    each activation of ACTS where the kernel applies one), and bf16 variants of
    the catalogued ops no model uses (bias_act); ``one_per_kernel`` keeps the
    first variant of each kernel (fast test)."""
    out: list[KernelSpec] = []
    for dt in ("bf16", "fp16"):
        for cin, cout, pool, prologue in ((24, 64, True, False), (64, 64, False, FUSED_PROLOGUE),
                                         (64, 256, True, False), (256, 256, False, FUSED_PROLOGUE)):
            bm, bn, bk, warps, stages = conv_blocks(cin, cout)
            for act in _acts(prologue):
                form = "pool" if pool else f"prologue,{act}" if prologue else "plain"
                out.append(KernelSpec(
                    f"conv3x3_fwd[{dt},{cin}->{cout},{form}]", conv3x3_fwd_kernel,
                    {"x_ptr": dt, "w_ptr": dt, "scale_ptr": "fp32", "shift_ptr": "fp32",
                     "y_ptr": dt, "idx_ptr": "i8", "psum_ptr": "fp32", "psumsq_ptr": "fp32"},
                    {"PROLOGUE": prologue, "ACT": activation(act).code, "POOL": pool, "STATS": True,
                     "ATOMIC": True, "F32_MATH": False, "DOT_PRECISION": "ieee", "BLOCK_M": bm,
                     "BLOCK_N": bn, "BLOCK_K": bk},
                    num_warps=warps, num_stages=stages, aligned=_conv_aligned(cin)))
        if dt == "fp16":
            break  # fp16: one conv variant per shape is enough to show it compiles
    for act in ACTS:
        out.append(KernelSpec(f"conv3x3_fwd[fp32/tf32,64->64,pool,prologue,{act},deterministic]",
                              conv3x3_fwd_kernel,
                              {"x_ptr": "fp32", "w_ptr": "fp32", "scale_ptr": "fp32",
                               "shift_ptr": "fp32", "y_ptr": "fp32", "idx_ptr": "i8",
                               "psum_ptr": "fp32", "psumsq_ptr": "fp32"},
                              {"PROLOGUE": True, "ACT": activation(act).code, "POOL": True, "STATS": True,
                               "ATOMIC": False, "F32_MATH": False, "DOT_PRECISION": "tf32",
                               "BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=8))
    # the model's weight gradients, and the prologue variant (FUSED_PROLOGUE) whatever the model runs
    for cin, cout, prologue in dict.fromkeys(((24, 64, False), (64, 64, FUSED_PROLOGUE), (64, 256, False),
                                              (256, 256, FUSED_PROLOGUE), (64, 64, True))):
        bm, bn, bk, warps, stages = wgrad_blocks(cin, cout)
        for act in _acts(prologue):
            out.append(KernelSpec(
                f"conv3x3_wgrad[bf16,{cin}->{cout}{f',prologue,{act}' if prologue else ''}]",
                conv3x3_wgrad_kernel,
                {"x_ptr": "bf16", "dy_ptr": "bf16", "scale_ptr": "fp32", "shift_ptr": "fp32",
                 "dw_ptr": "fp32"},
                {"PROLOGUE": prologue, "ACT": activation(act).code, "ATOMIC": True, "F32_MATH": False,
                 "DOT_PRECISION": "ieee", "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk},
                num_warps=warps, num_stages=stages, aligned=(*_conv_aligned(cin), "pix_per_split")))
    out += _bn_act_specs()
    out += _elementwise_specs()
    for has_d in (False, True):
        for cfg in gemm_configs():
            kw = dict(cfg.kwargs)
            out.append(KernelSpec("gemm_axpby[bf16]" if has_d else "gemm[bf16]", gemm_kernel,
                                  {"a_ptr": "bf16", "b_ptr": "bf16", "c_ptr": "bf16",
                                   "d_ptr": "bf16"},
                                  {"HAS_D": has_d, "F32_MATH": False, "DOT_PRECISION": "ieee",
                                   **kw}, floats=("alpha", "beta"),
                                  num_warps=cfg.num_warps, num_stages=cfg.num_stages))
    if one_per_kernel:
        seen: set[str] = set()
        out = [s for s in out if not (s.kernel.__name__ in seen or seen.add(s.kernel.__name__))]
    return out


def _cuobjdump() -> str | None:
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(bundled) if bundled.exists() else shutil.which("cuobjdump")


def cubin_usage(cubin: bytes) -> dict[str, int]:
    """Registers per thread, local memory per thread (where ptxas puts spills;
    0 means no spills) and stack bytes, read from the cubin by cuobjdump."""
    exe = _cuobjdump()
    if exe is None:
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        Path(path).write_bytes(cubin)
        res = subprocess.run([exe, "-res-usage", path], capture_output=True, text=True,
                             check=True)
    fields = dict(re.findall(r"\b(REG|STACK|LOCAL|SHARED):(\d+)", res.stdout))
    return {"registers": int(fields.get("REG", -1)), "local_bytes": int(fields.get("LOCAL", 0)),
            "stack_bytes": int(fields.get("STACK", 0))}


def compile_spec(spec: KernelSpec, target: str) -> dict[str, Any]:
    """Compile one variant for ``target`` ('sm_80' or 'sm_90'); its resources."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("AOT compilation needs a process without TRITON_INTERPRET=1 "
                           "(unset it: triton.compile does not work under the interpreter)")
    src = ASTSource(spec.kernel, spec.signature(), spec.constexprs, spec.attrs())
    k = triton.compile(src, target=TARGETS[target],
                       options={"num_warps": spec.num_warps, "num_stages": spec.num_stages})
    md = k.metadata
    row = {"kernel": spec.name, "target": target, "config": spec.config_label(),
           "num_warps": md.num_warps, "num_stages": md.num_stages, "shared_bytes": md.shared,
           "ptx_bytes": len(k.asm["ptx"]), "cubin_bytes": len(k.asm["cubin"])}
    row.update(cubin_usage(k.asm["cubin"]))
    return row
