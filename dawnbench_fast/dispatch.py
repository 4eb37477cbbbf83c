"""One switch for every trainer: ``--kernels {auto,torch,triton,cuda,cpu}``.

Every custom op has a plain PyTorch reference (backend ``torch``) and may have
implementations from other backends. Implementations register themselves here
with :func:`register`; trainers resolve the user's choice once with
:func:`resolve_backend` and then look ops up with :func:`get_op`.

Rules (../shared/DESIGN.md):
- ``torch``: the plain PyTorch reference ops.
- ``triton``: our Triton kernels (dawnbench_fast.kernels).
- ``cuda``: our CUDA C++ kernels (built extension, else CuPy/NVRTC).
- ``cpu``: our CPU kernels (numba, or the C++/OpenMP build of csrc/).
- ``auto``: the fastest available and measured best on the device.
Asking for a backend that cannot run here raises :class:`KernelsUnavailable`
with a one-line message; there is never a silent fallback. An op that a chosen
backend does not implement uses the reference, and :func:`op_table` reports
which implementation each op got, so run.json records it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

KERNEL_CHOICES = ("auto", "torch", "triton", "cuda", "cpu")


class KernelsUnavailable(RuntimeError):
    """The requested ``--kernels`` backend cannot run on this machine."""


# backend name -> probe(device) returning None when usable, else the reason
_PROBES: dict[str, Callable[[torch.device], str | None]] = {}
# (op, backend) -> implementation
_IMPLS: dict[tuple[str, str], Callable[..., Any]] = {}
# backend -> modules to import so that they register (lazy: triton is heavy)
_PROVIDERS: dict[str, list[str]] = {
    "torch": ["dawnbench_fast.models.layers", "dawnbench_fast.data.augment",
              "dawnbench_fast.optim.muon"],
    "cpu": ["dawnbench_fast.data.augment_cpu", "dawnbench_fast.models.conv_cpu",
            "dawnbench_fast.csrc.cpu_ops"],
    "triton": ["dawnbench_fast.kernels.ops"],
    "cuda": ["dawnbench_fast.csrc.ops"],
}
# What `auto` tries, best first, per device type. Only backends measured to be
# at least as fast as the reference on that device type belong here
# (docs/PERFORMANCE.md).
AUTO_ORDER: dict[str, list[str]] = {"cuda": ["torch"], "cpu": ["cpu", "torch"]}


def register_probe(backend: str, probe: Callable[[torch.device], str | None]) -> None:
    """Declare how to tell whether ``backend`` can run on a device."""
    _PROBES[backend] = probe


def register(op: str, backend: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``@register("bn_act", "triton")`` makes fn the triton bn_act."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        _IMPLS[(op, backend)] = fn
        return fn

    return deco


def _load_provider(backend: str) -> str | None:
    """Import the modules that register ``backend``; return why not, or None."""
    import importlib

    for mod in _PROVIDERS.get(backend, []):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:  # an optional dependency is absent
            if e.name and (e.name == mod or mod.startswith(e.name + ".")):
                return f"the {backend} backend is not part of this install ({mod} missing)"
            return f"the {backend} backend needs the Python package '{e.name}', which is not installed"
        except ImportError as e:
            return f"the {backend} backend failed to import: {e}"
    return None


def unavailable_reason(backend: str, device: torch.device) -> str | None:
    """None if ``backend`` can run on ``device``, else a one-line reason."""
    if backend not in KERNEL_CHOICES or backend == "auto":
        return f"unknown kernels backend {backend!r}; choose one of {', '.join(KERNEL_CHOICES)}"
    reason = _load_provider(backend)
    if reason is not None:
        return reason
    probe = _PROBES.get(backend)
    return probe(device) if probe is not None else None


def resolve_backend(choice: str, device: torch.device | str) -> str:
    """Turn the user's ``--kernels`` value into a concrete backend name.

    Raises KernelsUnavailable (one line, names the flag and the fix) when the
    requested backend cannot run on ``device``.
    """
    device = torch.device(device)
    if choice == "auto":
        for backend in AUTO_ORDER.get(device.type, ["torch"]):
            if unavailable_reason(backend, device) is None:
                return backend
        return "torch"
    reason = unavailable_reason(choice, device)
    if reason is not None:
        raise KernelsUnavailable(
            f"--kernels {choice}: {reason}; use --kernels torch or --kernels auto"
        )
    return choice


def get_op(op: str, backend: str) -> Callable[..., Any]:
    """The implementation of ``op`` for ``backend``, else the torch reference."""
    _load_provider("torch")
    if (op, backend) not in _IMPLS and backend != "torch":
        _load_provider(backend)
    fn = _IMPLS.get((op, backend)) or _IMPLS.get((op, "torch"))
    if fn is None:
        raise KeyError(f"no implementation of op {op!r} is registered")
    return fn


def op_table(backend: str, ops: list[str]) -> dict[str, str]:
    """Which backend actually serves each op (for run.json and reports)."""
    _load_provider("torch")
    if backend != "torch":
        _load_provider(backend)
    return {op: backend if (op, backend) in _IMPLS else "torch" for op in ops}
