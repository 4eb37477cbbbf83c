"""Which CUDA graphs a CIFAR run's step needs, and whether the run can replay
captured steps at all (the plan, made before any capture).

With the host-free step the learning rates and Muon's renormalisation are read
on the device at the step's tensor, so they no longer split the step into
variants. What still changes the graph from one step to another is host
structure: the training side of the epoch (another input shape) and whether
the whitening bias trains (another autograd graph). The end-of-run weight
average runs after the step at steps the host knows, a few foreach ops of
its own, not a variant of the step.

A run the captured step cannot serve keeps the eager step, and the plan
says why in words for the report and run.json, never silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dawnbench_fast.data.progressive import epoch_side
from dawnbench_fast.execution.gpu_defaults import TORCH_GRAPH_MODES


@dataclass(frozen=True)
class StepVariant:
    """One graph of the step: its input side and whether the whitening bias trains."""

    side: int
    whiten_bias_grad: bool

    def name(self) -> str:
        return f"{self.side}px/{'whiten-bias' if self.whiten_bias_grad else 'frozen'}"


@dataclass(frozen=True)
class CapturePlan:
    """``variants``: each graph the run replays, with how many steps replay
    it, in the order the run first meets them; ``eager_why``: why the run
    does not replay graphs (empty when it does); ``static``: whether its
    steps still take their inputs through static buffers (cifar.static_step:
    the captured step's body, run eagerly), as ``capture=static`` asks."""

    variants: dict[StepVariant, int] = field(default_factory=dict)
    eager_why: tuple[str, ...] = ()
    static: bool = False

    @property
    def captured(self) -> bool:
        return not self.eager_why

    @property
    def uses_static_step(self) -> bool:
        """Whether the steps go through the static buffers (captured, or ``static``)."""
        return self.captured or self.static

    def record(self) -> dict:
        """The plan as run.json records it."""
        return {"captured": self.captured, "static_inputs": self.uses_static_step,
                "eager_why": list(self.eager_why),
                "variants": {v.name(): n for v, n in self.variants.items()}}


def step_variants(epoch_steps: list[int], progressive: tuple[int, ...], full_side: int,
                  whiten_bias_steps: int) -> dict[StepVariant, int]:
    """The graphs the run's steps need (``epoch_steps``: each epoch's steps),
    with how many steps replay each, in the order of first use."""
    out: dict[StepVariant, int] = {}
    step = 0
    for epoch, n in enumerate(epoch_steps):
        side = epoch_side(progressive, epoch, full_side)
        for _ in range(n):
            v = StepVariant(side, step < whiten_bias_steps)
            out[v] = out.get(v, 0) + 1
            step += 1
    return out


def blockers(prune: float, distributed: bool) -> tuple[str, ...]:
    """What keeps a run on the eager step whatever is asked, one sentence each."""
    why = []
    if prune:
        why.append("--set prune: the epoch's images are chosen on the host from the last epoch's "
                   "losses, and the step's loss is kept per image")
    if distributed:
        why.append("a torchrun job: the gradients are summed across the ranks between the backward "
                   "and the optimisers, outside any one process's graph")
    return tuple(why)


def eager_reasons(device: torch.device, prune: float, distributed: bool,
                  choice: str = "auto", compile_mode: str | None = None) -> tuple[str, ...]:
    """Why a run on ``device`` with ``capture`` = ``choice`` (and torch.compile
    in ``compile_mode``, None where it does not compile) replays no graph of
    the whole step, one sentence each (none: it replays them)."""
    why = list(blockers(prune, distributed))
    if compile_mode in TORCH_GRAPH_MODES:
        why.append(f"--set compile_mode={compile_mode}: torch.compile's own CUDA graphs replay the "
                   "compiled forward and backward instead (the alternative measured against the "
                   "captured step)")
    if choice == "off":
        why.append("--set capture=off: the eager step, as asked")
    elif choice == "static":
        why.append("--set capture=static: the captured step's static inputs, run eagerly without graphs")
    elif device.type != "cuda":
        why.append(f"the step runs on {device.type}: CUDA graphs replay on CUDA devices only")
    return tuple(why)


def capture_plan(device: torch.device, epoch_steps: list[int], progressive: tuple[int, ...], full_side: int,
                 whiten_bias_steps: int, prune: float = 0.0, distributed: bool = False,
                 choice: str = "auto", compile_mode: str | None = None) -> CapturePlan:
    """The run's graphs and whether it may replay them (see the module's doc)."""
    static = choice == "static" and not blockers(prune, distributed)
    return CapturePlan(step_variants(epoch_steps, progressive, full_side, whiten_bias_steps),
                       eager_reasons(device, prune, distributed, choice, compile_mode), static)
