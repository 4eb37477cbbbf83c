"""The ``cpu`` backend's probe and its share of csrc: the CPU (OpenMP) build
of the shared CUDA C++ math, registered only for the ops where
benchmarks/bench_csrc_cpu.py measured it at least as fast as the other CPU
paths on this machine class (docs/PERFORMANCE.md, "CUDA C++ kernels and their
CPU build"):

- ``bn_act``: faster than torch's BatchNorm + activation (oneDNN/ATen);
  Its ``pooled`` attribute is the fused max-pool + BN + act
  (csrc/pool_bn_act.py), which the cpu conv group uses after its first conv;
- the conv group's weight gradient (csrc/conv_wgrad.py, ``dpbf16``): faster
  than oneDNN's on every conv of the net;
- ``augment``: faster than the numba kernel of data/augment_cpu.py (and
  bit-identical to it and to the reference), which is therefore registered
  nowhere: this module is the one place that says which ``augment`` serves.

``conv_group`` comes from models/conv_cpu.py. The tensor-core GEMM's CPU build
is an emulation for tests, never registered. Without the C++ build
(``dawnbench_fast._C`` neither importable nor buildable) the probe refuses
the backend with a one-line reason: ``--kernels cpu`` means our kernels, and
numba plus the reference in their place would be a silent fallback.
"""

from __future__ import annotations

import platform

import torch

from dawnbench_fast import dispatch

# pool_bn_act gives bn_act .pooled; conv_wgrad hands the conv group its dpbf16 weight gradient
from dawnbench_fast.csrc import conv_wgrad, native, ops, pool_bn_act  # noqa: F401
from dawnbench_fast.machine import cpu_flags

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


def probe(device: torch.device) -> str | None:
    """dispatch probe of backend ``cpu``: None if usable, else one line."""
    if device.type != "cpu":
        return f"the cpu kernels run on the CPU, not on {device}; use --device cpu"
    reason = native.unavailable_reason()  # looked up now, so tests can simulate a missing build
    if reason is not None:
        return reason
    mod = native.load()
    return build_isa_reason(mod.cpu_path(), mod.nhwc_kernels_vectorised(), cpu_flags(),
                            platform.machine())


dispatch.register_probe("cpu", probe)
dispatch.register("bn_act", "cpu")(ops.bn_act)
dispatch.register("augment", "cpu")(ops.augment)
