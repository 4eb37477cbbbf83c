"""One switch for every trainer: ``--kernels {auto,torch,triton,cuda,cpu}``,
and the one catalogue of the ops it switches.

:data:`CATALOGUE` lists every op once: its name, its contract (one line),
its reference implementation, the plain PyTorch code that *is* backend
``torch`` and the specification the tests compare every other backend with,
and, for each backend where it has no implementation of its own, why
(``no_face``; tests/ops/test_dispatch.py checks that every (op, backend) pair is
registered or explained there).
Other backends register their implementations with :func:`register` from
the op's module (``dawnbench_fast.kernels.<op>`` for Triton,
``dawnbench_fast.csrc.<op>`` for the CUDA C++ kernels and their CPU build);
trainers resolve the user's choice once with :func:`resolve_backend`, look
ops up with :func:`get_op`, and record :func:`op_table` in run.json.

Rules (docs/ARCHITECTURE.md, "Design rules"):
- ``torch``: the reference ops of the catalogue.
- ``triton``: our Triton kernels (dawnbench_fast.kernels).
- ``cuda``: our CUDA C++ kernels (built extension, else CuPy/NVRTC).
- ``cpu``: our CPU kernels: the C++/OpenMP build of csrc/ (bn_act, augment)
  and the shape-tuned oneDNN convolution (conv_group, csrc/conv_group.py).
  Without the C++ build ``--kernels cpu`` is an error, not numba and torch
  in its place.
- ``auto``: on the CPU, the first backend of :data:`AUTO_ORDER` that can run
  here; on a GPU, each op's measured winner on that GPU model
  (kernel_winners.json), torch's on a GPU the table does not list.
Asking for a backend that cannot run here raises :class:`KernelsUnavailable`
with a one-line message; there is never a silent fallback. An op that a chosen
backend does not implement uses the reference, and :func:`op_table` says so.
Registering the same (op, backend) twice is an error: which implementation
serves is decided in one place, never by import order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

KERNEL_CHOICES = ("auto", "torch", "triton", "cuda", "cpu")


class KernelsUnavailable(RuntimeError):
    """The requested ``--kernels`` backend cannot run on this machine."""


@dataclass(frozen=True)
class Op:
    """One catalogued op: what every backend's implementation must do."""

    name: str
    contract: str  # one-line signature and semantics, shared by every backend
    reference: str  # "<module>.<qualname>" of the plain PyTorch implementation (backend torch)
    # backend -> why it has no implementation of its own (there the reference serves the op)
    no_face: dict[str, str] = field(default_factory=dict, hash=False)


# The GEMM ops (linear, matmul, newton_schulz) on the cuda and cpu backends.
_GEMM_IS_TORCH = {
    "cuda": "torch's matmul (cuBLAS) serves it: our tensor-core GEMM (csrc/gemm.py) is a tested "
            "reference, not measured faster than cuBLAS, and registered for no op",
    "cpu": "torch's matmul (oneDNN) serves it: the CPU build of our GEMM (csrc/gemm_mma_cpu.cpp) "
           "emulates the tensor-core tiles, for tests only",
}


CATALOGUE: dict[str, Op] = {
    op.name: op
    for op in (
        Op("augment", "augment(padded u8 [N,H+2t,W+2t,C], indices, params: AugmentParams, scale[C], "
           "shift[C], size=32) -> float32 [B,C,size,size] in channels_last memory: crop at (oy, ox), "
           "flip, cutout, x = u8 * scale[c] + shift[c]",
           "dawnbench_fast.data.augment.augment_torch"),
        Op("conv_group", "conv_group(group: ConvGroup, x NCHW) -> act(bn2(conv2(act(bn1(pool2(conv1(x)))))))"
           ", batch norms in training or eval per their .training, running stats updated",
           "dawnbench_fast.layer_ops.conv_group",
           no_face={"cuda": "no CUDA C++ conv kernel: the reference serves it (cuDNN's convolutions "
                            "and the cuda backend's bn_act); the GPU's own conv group is Triton's"}),
        Op("bn_act", "bn_act(x NCHW, bn: BatchNorm2d, act='gelu') -> act(bn(x)), training or eval per "
           "bn.training, running stats updated", "dawnbench_fast.layer_ops.bn_act"),
        Op("linear", "linear(x [*, K], weight [N, K]) -> x @ weight.T (no bias; autocast-aware)",
           "dawnbench_fast.layer_ops.linear", no_face=_GEMM_IS_TORCH),
        Op("matmul", "matmul(a [M, K], b [K, N]) -> a @ b (2-D, any strides, a's dtype)",
           "dawnbench_fast.newton_schulz.matmul", no_face=_GEMM_IS_TORCH),
        Op("newton_schulz", "newton_schulz(g [M, N], steps=3, eps=1e-7) -> bf16 [M, N] ~ U V^T of g's "
           "SVD (Muon's quintic iteration)", "dawnbench_fast.newton_schulz.newton_schulz",
           no_face=_GEMM_IS_TORCH),
        Op("bias_act", "bias_act(x [N,C,H,W] any layout, bias [C], act='gelu') -> "
           "act(x + bias[None,:,None,None]) in fp32, in x's dtype (fp32/bf16/fp16) and memory format; "
           "grads of x and bias",
           "dawnbench_fast.layer_ops.bias_act",
           no_face={"cpu": "not measured faster throughout on the 2-core EPYC (figures in csrc/bias_act.py): "
                           "the C++ build wins 1.2-2.2x forward + backward at batch 500 but loses 1.6x at "
                           "batch 1 in bf16 channels_last, where a Python custom op's ~15 us a call "
                           "outweighs the reference's ATen ops; the build is tested, not served"}),
    )
}

# backend name -> probe(device) returning None when usable, else the reason
_PROBES: dict[str, Callable[[torch.device], str | None]] = {}
# (op, backend) -> implementation, for every backend but torch (the catalogue's references)
_IMPLS: dict[tuple[str, str], Callable[..., Any]] = {}
# backend -> the modules that register its implementations and probe (imported
# lazily: Triton and the C++ build are heavy). Each op is registered for a
# backend by exactly one of them; :func:`register` enforces it.
_PROVIDERS: dict[str, list[str]] = {
    "torch": [],
    "cpu": ["dawnbench_fast.csrc.engine", "dawnbench_fast.csrc.augment", "dawnbench_fast.csrc.bn_act",
            "dawnbench_fast.csrc.conv_group"],
    "triton": ["dawnbench_fast.kernels.augment", "dawnbench_fast.kernels.bn_act",
               "dawnbench_fast.kernels.conv_group", "dawnbench_fast.kernels.gemm",
               "dawnbench_fast.kernels.bias_act"],
    "cuda": ["dawnbench_fast.csrc.engine", "dawnbench_fast.csrc.augment", "dawnbench_fast.csrc.bn_act",
             "dawnbench_fast.csrc.gemm", "dawnbench_fast.csrc.bias_act"],
}
# What `auto` tries, best first, per device type: only backends measured at
# least as fast as the reference on that device type, op for op, belong here
# (docs/PERFORMANCE.md). cpu: the csrc CPU build of bn_act and augment and the
# shape-tuned conv beat torch on the 2-core EPYC ("CPU kernels of the training
# step", "CUDA C++ kernels and their CPU build"). cuda: not an order but a
# table, op by op and GPU model by GPU model (kernel_winners.py), whose
# fallback is the reference.
AUTO_ORDER: dict[str, list[str]] = {"cuda": ["torch"], "cpu": ["cpu", "torch"]}


class PerOpBackend(str):
    """``--kernels auto`` on a GPU: a backend per op, from the measured winners
    table (kernel_winners.py). Its string is ``"per-op"`` when the ops' backends
    differ from torch, else ``"torch"``; ``choices`` maps op -> backend,
    ``why`` op -> the measurement (or its absence) behind the choice and
    ``in_step`` op -> the in-step benchmark's figures behind it, where the
    table's row came from the captured step (kernel_winners.figures). The
    in-step benchmark's arms (tools/step_timing.py) are PerOpBackends too."""

    choices: dict[str, str]
    why: dict[str, str]
    in_step: dict[str, dict]

    def __new__(cls, choices: dict[str, str], why: dict[str, str],
                in_step: dict[str, dict] | None = None) -> PerOpBackend:
        self = super().__new__(cls, "torch" if set(choices.values()) <= {"torch"} else "per-op")
        self.choices, self.why, self.in_step = dict(choices), dict(why), dict(in_step or {})
        return self

    def __reduce__(self):  # pickles (checkpoints, spawn) as itself, not as a plain str
        return (PerOpBackend, (self.choices, self.why, self.in_step))


def _auto_on_gpu(device: torch.device) -> PerOpBackend:
    """Each op's backend from the winners table for this GPU; a winner that
    cannot run here (no extension build, no Triton) gives way to torch's."""
    from dawnbench_fast import kernel_winners

    gpu, table = kernel_winners.gpu_name(device), kernel_winners.load_table()
    picked, why = kernel_winners.choices(gpu, CATALOGUE, table)
    in_step = kernel_winners.figures(gpu, CATALOGUE, table)
    for op, b in picked.items():
        reason = None if b == "torch" else unavailable_reason(b, device)
        if reason is not None:
            picked[op], why[op] = "torch", f"{why[op]}; {b} cannot run here ({reason}): torch's"
    return PerOpBackend(picked, why, in_step)


def _qualified(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def register_probe(backend: str, probe: Callable[[torch.device], str | None]) -> None:
    """Declare how to tell whether ``backend`` can run on a device."""
    _PROBES[backend] = probe


def register(op: str, backend: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``@register("bn_act", "triton")`` makes fn the triton bn_act.

    ``op`` must be catalogued, ``backend`` must not be ``torch`` (the
    catalogue names the reference) and (op, backend) may be registered once;
    re-importing the same module (same qualified name) is not a second one."""
    if op not in CATALOGUE:
        raise ValueError(f"register: op {op!r} is not in dispatch.CATALOGUE ({', '.join(CATALOGUE)})")
    if backend not in KERNEL_CHOICES or backend in ("auto", "torch"):
        raise ValueError(f"register: backend {backend!r} cannot register ops; the torch "
                         "implementation is the catalogue's reference")

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        old = _IMPLS.get((op, backend))
        if old is not None and _qualified(old) != _qualified(fn):
            raise ValueError(f"register: {op!r} for backend {backend!r} is already {_qualified(old)}; "
                             f"{_qualified(fn)} would replace it (choose one in dispatch._PROVIDERS)")
        _IMPLS[(op, backend)] = fn
        return fn

    return deco


def _load_provider(backend: str) -> str | None:
    """Import the modules that register ``backend``; return why not, or None."""
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
    return probe(torch.device(device)) if probe is not None else None


def resolve_backend(choice: str, device: torch.device | str) -> str:
    """Turn the user's ``--kernels`` value into a concrete backend name
    (``auto``: the first of ``AUTO_ORDER[device type]`` that can run here).

    Raises KernelsUnavailable (one line, names the flag and the fix) when the
    requested backend cannot run on ``device``.
    """
    device = torch.device(device)
    if choice == "auto" and device.type == "cuda":
        return _auto_on_gpu(device)
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


def reference(op: str) -> Callable[..., Any]:
    """The catalogued PyTorch reference of ``op`` (the ``torch`` backend)."""
    if op not in CATALOGUE:
        raise KeyError(f"no op {op!r} in dispatch.CATALOGUE ({', '.join(CATALOGUE)})")
    module, _, name = CATALOGUE[op].reference.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _served(op: str, backend: str) -> tuple[str, Callable[..., Any]]:
    if isinstance(backend, PerOpBackend):
        backend = backend.choices.get(op, "torch")
    if backend not in KERNEL_CHOICES or backend == "auto":
        raise ValueError(f"backend {backend!r} is not concrete; resolve --kernels with resolve_backend first")
    if backend != "torch" and (op, backend) not in _IMPLS:
        _load_provider(backend)
    fn = _IMPLS.get((op, backend))
    return (backend, fn) if fn is not None else ("torch", reference(op))


def get_op(op: str, backend: str) -> Callable[..., Any]:
    """The implementation of ``op`` for ``backend``, else the torch reference."""
    return _served(op, backend)[1]


def op_table(backend: str, ops: list[str] | None = None) -> dict[str, dict[str, str]]:
    """For run.json and reports: ``{op: {"backend": <backend that serves it>,
    "impl": "<module>.<qualname>"}}`` for every catalogued op (or ``ops``);
    under ``auto`` on a GPU also ``"why"``: the measurement behind the choice,
    and ``"in_step"`` where the winners table's row came from the in-step
    benchmark: its step medians per face, the replays and when."""
    table = {}
    for op in ops if ops is not None else list(CATALOGUE):
        served, fn = _served(op, backend)
        table[op] = {"backend": served, "impl": _qualified(fn)}
        if isinstance(backend, PerOpBackend) and op in backend.why:
            table[op]["why"] = backend.why[op]
        if isinstance(backend, PerOpBackend) and op in backend.in_step:
            table[op]["in_step"] = backend.in_step[op]
    return table
