"""What machine this is, as the OS reports it: the CPU's model and features,
and how busy the machine is. One home for the reports (run.json) and for the
caches keyed by the machine (the roofline's CPU peaks, kernel choices).

Speed on shared machines is only comparable when the machine was idle, so
run.json records the load average before and after each run.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

# CPU features that decide which kernels oneDNN and our C++ can use, and the
# default precision (dawnbench_fast.config.precision): x86's flags, then ARM's.
_FEATURES = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16",
             "avx512_vnni", "amx_bf16", "amx_tile", "asimd", "sve", "bf16")


def _cpuinfo_fields() -> dict[str, str]:
    """The first processor's ``key: value`` lines of /proc/cpuinfo ({} elsewhere)."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return fields
    for line in text.split("\n\n", 1)[0].splitlines():
        if ":" in line:
            key, value = line.split(":", 1)
            fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_model() -> str:
    """The CPU's model name exactly as the OS reports it (/proc/cpuinfo's
    ``model name``), else what the platform module knows."""
    return _cpuinfo_fields().get("model name") or platform.processor() or platform.machine()


# Flags this process treats as absent (comma-separated), so that a machine that has
# AMX or AVX-512 BF16 still proves the code paths and skips of one that lacks them
# (tests/test_benchmarks.py runs the benchmarks so). The C++ build asks CPUID itself:
# the Python checks in front of its kernels honour this too (csrc/conv_group_wgrad.py).
HIDE_FLAGS_ENV = "DAWNBENCH_HIDE_CPU_FLAGS"


def hidden_cpu_flags() -> set[str]:
    """The flags ``DAWNBENCH_HIDE_CPU_FLAGS`` hides (empty when unset)."""
    return {f.strip() for f in os.environ.get(HIDE_FLAGS_ENV, "").split(",") if f.strip()}


def cpu_flags() -> set[str]:
    """The CPU's feature flags as the OS reports them: /proc/cpuinfo's ``flags``
    on x86, ``Features`` on ARM (empty where there is no /proc/cpuinfo), less
    those ``DAWNBENCH_HIDE_CPU_FLAGS`` hides."""
    f = _cpuinfo_fields()
    return set((f.get("flags") or f.get("Features") or "").split()) - hidden_cpu_flags()


def cpu_info() -> dict[str, object]:
    """The CPU as the OS reports it: model name verbatim, vendor, family, model
    and stepping numbers (a VM may hide the marketing name but not these), the
    logical CPUs, and the vector/matrix features that select kernels."""
    f = _cpuinfo_fields()
    flags = cpu_flags()
    return {
        "model_name": cpu_model(),
        "vendor": f.get("vendor_id"),
        "family": f.get("cpu family"),
        "model": f.get("model"),
        "stepping": f.get("stepping"),
        "logical_cpus": os.cpu_count(),
        "features": [x for x in _FEATURES if x in flags],
        "machine": platform.machine(),
    }


# The CPU classes the project measures on, as the docs name them (docs/PERFORMANCE.md,
# "The machines"): AMD's by family and model, Intel's Sapphire-Rapids-class Xeons by AMX.
CPU_CLASSES: tuple[str, ...] = ("Zen 4", "Zen 5", "AMX")


def cpu_class(info: dict[str, object]) -> str | None:
    """The class of a CPU described as :func:`cpu_info` describes it ("Zen 4":
    AMD family 25 model 17, "Zen 5": AMD family 26, "AMX": an x86 CPU with
    AMX tiles), None for any other."""
    vendor, family, model = info.get("vendor"), str(info.get("family")), str(info.get("model"))
    if vendor == "AuthenticAMD" and (family, model) == ("25", "17"):
        return "Zen 4"
    if vendor == "AuthenticAMD" and family == "26":
        return "Zen 5"
    if "amx_tile" in (info.get("features") or ()):
        return "AMX"
    return None


def user_cache_dir() -> Path:
    """The per-user cache every part of the package shares (the dataset, the
    built C++ module, measured CPU peaks, kernel choices): ``$DAWNBENCH_CACHE``,
    else ``$XDG_CACHE_HOME/dawnbench_fast``, else ``~/.cache/dawnbench_fast``."""
    if os.environ.get("DAWNBENCH_CACHE"):
        return Path(os.environ["DAWNBENCH_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dawnbench_fast"


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
