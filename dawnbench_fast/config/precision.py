"""The autocast precision of a run, and ``auto``: what the hardware computes
natively.

bf16 autocast pays on a CPU only where the CPU computes bf16 in hardware:
AVX-512 BF16 or AMX on x86 (/proc/cpuinfo flags ``avx512_bf16``,
``amx_bf16``), the BF16 extension on ARM (``bf16`` in ``Features``).
Elsewhere (an AVX2-only laptop, say) oneDNN and ATen emulate it by converting
to fp32 and back around every op, slower than fp32 itself, so ``auto`` gives
fp32 there. On x86 ATen's own vector code must also be AVX-512: under
``ATEN_CPU_CAPABILITY=avx2`` (``torch.backends.cpu.get_cpu_capability()``
says ``AVX2``) ATen's bf16 element-wise and reduction kernels run the
emulated AVX2 forms even on a bf16 CPU, so ``auto`` gives fp32 there too.

An explicit precision (``--precision``, ``--set precision=``, ``--config``)
is always obeyed; the choice and its reason go into run.json's
``config.extra.precision`` (:func:`with_resolved_precision`).
"""

from __future__ import annotations

import dataclasses
import platform
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from dawnbench_fast.hardware.machine import cpu_flags

PRECISIONS = ("auto", "bf16", "fp16", "fp32")
_X86 = {"x86_64", "amd64", "i386", "i686", "x86"}
_ARM = {"aarch64", "arm64", "armv8l", "armv8b"}
_X86_BF16_FLAGS = ("avx512_bf16", "amx_bf16")

C = TypeVar("C")


@dataclass(frozen=True)
class PrecisionChoice:
    """What a run asked for, what it runs, and why (one line)."""

    requested: str
    precision: str
    why: str

    def record(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def cpu_computes_bf16(flags: set[str], machine: str, capability: str) -> tuple[bool, str]:
    """Whether a CPU with these /proc/cpuinfo ``flags``, ``platform.machine()``
    and ATen vector ``capability`` computes bf16 natively, and why (one line)."""
    arch = machine.lower()
    if arch in _X86:
        native = [f for f in _X86_BF16_FLAGS if f in flags]
        if not native:
            return False, "this x86 CPU has neither avx512_bf16 nor amx_bf16: bf16 would be emulated"
        if not capability.upper().startswith("AVX512"):
            return False, (f"ATen runs its {capability} kernels (ATEN_CPU_CAPABILITY?), whose bf16 is "
                           f"emulated, although the CPU has {', '.join(native)}")
        return True, f"the CPU has {', '.join(native)} and ATen runs its {capability} kernels"
    if arch in _ARM:
        if "bf16" in flags:
            return True, "this ARM CPU has the BF16 extension (bf16 in Features)"
        return False, "this ARM CPU lacks the BF16 extension (no bf16 in Features): bf16 would be emulated"
    return False, f"bf16 support of a {machine or 'unknown'} CPU is not known here"


def resolve_precision(requested: str, device: torch.device, *, flags: set[str] | None = None,
                      machine: str | None = None, capability: str | None = None) -> PrecisionChoice:
    """``requested`` as a concrete precision for ``device``. ``auto`` on the CPU:
    bf16 where :func:`cpu_computes_bf16`, else fp32; on CUDA: bf16 (the
    recipe's GPU setting). ``flags``, ``machine`` and ``capability`` default to
    this machine's (tests pass fake ones)."""
    if requested not in PRECISIONS:
        raise ValueError(f"precision {requested!r}: must be one of {', '.join(PRECISIONS)}")
    if device.type != "cpu":
        if requested == "auto":
            return PrecisionChoice("auto", "bf16", f"auto on {device.type}: bf16 autocast")
        return PrecisionChoice(requested, requested, "asked for")
    native, why = cpu_computes_bf16(
        cpu_flags() if flags is None else flags,
        platform.machine() if machine is None else machine,
        torch.backends.cpu.get_cpu_capability() if capability is None else capability)
    if requested == "auto":
        return PrecisionChoice("auto", "bf16" if native else "fp32", f"auto: {why}")
    if requested == "bf16" and not native:
        return PrecisionChoice(requested, requested, f"asked for, although {why}")
    return PrecisionChoice(requested, requested, "asked for")


def with_resolved_precision(cfg: C, device: torch.device) -> tuple[C, PrecisionChoice]:
    """``cfg`` (a dataclass config with ``precision`` and ``extra`` fields) with
    its precision made concrete for ``device`` and the choice noted in
    ``extra["precision"]``, so that run.json's config says what ran and why."""
    current: Any = cfg
    choice = resolve_precision(current.precision, device)
    extra = {**current.extra, "precision": choice.record()}
    return dataclasses.replace(current, precision=choice.precision, extra=extra), choice
