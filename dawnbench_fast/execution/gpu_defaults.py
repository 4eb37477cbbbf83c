"""What the published GPU records (airbench) do by default, done by default
here on CUDA: ``torch.compile`` of the training step's forward and loss,
cuDNN autotuning (``torch.backends.cudnn.benchmark``), with autocast (the
recipe's ``precision``) and the clock read through CUDA events
(dawnbench_fast.training.train.Phases) and no host synchronisation per step.

Their one-off costs (compilation, cuDNN's trial runs) fall in the warm-up,
outside the clock and timed, as in the published recipes: a throwaway task
runs the same compiled function on the same shapes first, and the timed run
reuses what it compiled (:func:`compiled` keeps one compiled function per
process for that reason).

On the CPU compilation stays off unless asked for (``--compile``):
compiling the CIFAR step on this project's 2-core CPU was measured slower than
eager (docs/FACTS.md, "This machine class"). On an H200 these defaults gave
the CIFAR-10 default a 27 s warm-up and a 2.7 s clock, 1.6x the published
recipe's (tools/gpu_suite/, docs/PERFORMANCE.md, "CIFAR-10 to 94% on
an H200").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from dawnbench_fast.config.overrides import ConfigError

COMPILE_CHOICES = ("auto", "on", "off")
COMPILE_RULE = "must be auto, on or off (auto: on CUDA only; --compile / --no-compile)"
# torch.compile's backend; tests swap in "eager" (Dynamo's capture without code generation).
COMPILE_BACKEND = "inductor"
_COMPILED: dict[tuple[Callable[..., Any], Any, str, bool], Callable[..., Any]] = {}
# torch.compile's modes (Inductor's). auto: on CUDA the 2026 CIFAR record's
# "max-autotune-no-cudagraphs" (Triton templates autotuned in the warm-up, and
# no CUDA graphs of Inductor's own: the CIFAR step captures the whole step
# itself, cifar/step.py); elsewhere Inductor's default. "reduce-overhead"
# and "max-autotune" are torch.compile's own CUDA-graph modes: the alternative
# to the whole-step capture, which they then replace (cifar/step.py).
COMPILE_MODES = ("auto", "default", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune")
TORCH_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def check_compile(choice: str) -> None:
    """A ConfigError naming the field unless ``choice`` is one of :data:`COMPILE_CHOICES`."""
    if choice not in COMPILE_CHOICES:
        raise ConfigError(f"--set compile={choice}: {COMPILE_RULE}")


def compile_enabled(choice: str, device: torch.device) -> bool:
    """Whether a run with ``compile`` = ``choice`` compiles on ``device``:
    ``auto`` on CUDA only, ``on`` and ``off`` everywhere."""
    check_compile(choice)
    return choice == "on" or (choice == "auto" and device.type == "cuda")


def compile_mode(choice: str, device: torch.device) -> str:
    """The torch.compile mode a run with ``compile_mode`` = ``choice`` uses on ``device``."""
    if choice not in COMPILE_MODES:
        raise ConfigError(f"--set compile_mode={choice}: must be one of {', '.join(COMPILE_MODES)}")
    if choice == "auto":
        return "max-autotune-no-cudagraphs" if device.type == "cuda" else "default"
    return choice


# Dynamo's limit of compiled graphs per function before it gives up and runs the
# function eagerly, set explicitly: the CIFAR step alone needs six forward and
# backward graphs (three training sides, the whitening bias trained or frozen)
# against Dynamo's default of 8, and past the limit the fallback is silent.
# With ``fail_on_recompile_limit_hit`` a run that would pass it stops instead.
RECOMPILE_LIMIT = 16


def set_recompile_limit(limit: int = RECOMPILE_LIMIT) -> None:
    """Dynamo's recompile limit (and its older name) set to ``limit``, and
    hitting it made an error instead of a silent fall back to eager."""
    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, limit)
    if hasattr(config, "fail_on_recompile_limit_hit"):
        config.fail_on_recompile_limit_hit = True


@contextmanager
def no_recompile() -> Iterator[None]:
    """Any compilation inside is an error (Dynamo's ``error_on_recompile``):
    around a CUDA graph's capture, where the warm-up has compiled every shape
    and a recompilation would read the generator's state mid-capture."""
    with torch._dynamo.config.patch(error_on_recompile=True):
        yield


def compiled(fn: Callable[..., Any], mode: str = "default", fullgraph: bool = False) -> Callable[..., Any]:
    """``torch.compile(fn, mode=mode)``, one per function, mode and backend
    for the whole process.

    Dynamo keeps its compiled graphs per compiled function (and guards them
    on the inputs' shapes, dtypes and the module's structure, not on which
    module instance it is), so the warm-up's throwaway model and the timed
    model share the graphs only if they share this wrapper. ``dynamic=False``:
    every shape the run meets (one per training resolution) is compiled for
    itself in the warm-up, rather than recompiled as a dynamic-shape graph
    inside the clock when a second shape appears. ``fullgraph=True``: a graph
    break would split the step into pieces run between Python, which a
    captured step cannot hold and an eager fallback hides: it is an error
    instead (the CIFAR step asks for it, as the 2026 record compiles its
    model). ``mode`` is Inductor's (:data:`COMPILE_MODES` less auto);
    another backend (tests) takes none."""
    key = (fn, COMPILE_BACKEND, mode, fullgraph)
    if key not in _COMPILED:
        set_recompile_limit()
        options = {"mode": mode} if COMPILE_BACKEND == "inductor" and mode != "default" else {}
        _COMPILED[key] = torch.compile(fn, backend=COMPILE_BACKEND, dynamic=False, fullgraph=fullgraph,
                                       **options)
    return _COMPILED[key]


def configure_cuda(device: torch.device, deterministic: bool) -> None:
    """cuDNN autotuning on CUDA (each convolution shape times its algorithms
    once, in the warm-up), unless ``--deterministic`` asked for fixed ones."""
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = not deterministic


def execution_record(device: torch.device, cfg: Any) -> dict[str, object]:
    """run.json's ``execution``: what this run did of the GPU defaults."""
    choice = getattr(cfg, "compile", "off")
    return {
        "compile": compile_enabled(choice, device),
        "compile_choice": choice,
        "compile_backend": COMPILE_BACKEND if compile_enabled(choice, device) else None,
        "compile_mode": (compile_mode(getattr(cfg, "compile_mode", "auto"), device)
                         if compile_enabled(choice, device) else None),
        "cudnn_benchmark": bool(device.type == "cuda" and torch.backends.cudnn.benchmark),
        "clock": "cuda_events" if device.type == "cuda" else "host",
    }
