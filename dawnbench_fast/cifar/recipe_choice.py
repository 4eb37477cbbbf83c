"""Which named recipe a run takes when it names none (``--recipe auto``, the
default): the cheapest schedule at the project's accuracy bar on the machine
the run is on.

On a GPU that is the 2026 record's curriculum (the GPU measured it; a CPU
schedule never becomes a GPU's default without a GPU measurement). On a CPU a
step's time follows its arithmetic, so the schedules are priced by this CPU
class's measured step time at each side (:data:`SIDE_COSTS`; a side its class
has not measured by the net's multiply-accumulates, which Zen 4 follows to
within 0.03 of a 32-px step) and the cheapest is taken. run.json's
``config.extra.recipe_choice`` and the report say which was taken and why.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch

from dawnbench_fast.cifar.recipe import RECIPES, CifarRecipe
from dawnbench_fast.data.progressive import epoch_side
from dawnbench_fast.hardware.machine import cpu_class, cpu_info
from dawnbench_fast.models.cifar_net import CifarNet, macs_per_image
from dawnbench_fast.training.task import epoch_steps

AUTO = "auto"
GPU_RECIPE = "dawnbench_fast"
# The schedules a CPU chooses among: each has a ten-seed record at the bar (mean >= 94.05%,
# 9 of 10 reaching 94%) and whole runs on a CPU faster than the default's (the CPU's schedule:
# 0.936 of them on Zen 4 at 9.5 epochs, plus the 8 steps of its 9.75; docs/PERFORMANCE.md,
# "The CPU's schedule", has the ones screened).
CPU_RECIPES: tuple[str, ...] = ("dawnbench_fast_cpu", "dawnbench_fast")
FULL_SIDE = 32
TRAIN_IMAGES = 50_000

# A training step's time at each side over the 32-px step's, per CPU class, as measured
# (benchmarks/bench_recipe_step.py at batch 1536, idle, in the docs/results folders named).
SIDE_COSTS: dict[str, dict[int, float]] = {
    "Zen 4": {16: 0.211, 20: 0.374, 24: 0.517, 28: 0.78},  # step-sides-zen4-0b91acc, -267a35c (28 px)
    "AMX": {24: 0.64, 28: 0.82},  # step-sides-amx
}


@dataclass(frozen=True)
class RecipeChoice:
    """What a run asked for (a recipe's name or ``auto``), the recipe it runs, and why (one line)."""

    requested: str
    recipe: str
    why: str

    def record(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@functools.cache
def _net(widths: tuple[int, int, int], whiten_kernel: int) -> CifarNet:
    """One net of these widths, built once: macs_per_image reads only its layers' shapes."""
    return CifarNet(widths, whiten_kernel)


def mac_share(side: int, widths: tuple[int, int, int] = (64, 256, 256), whiten_kernel: int = 2) -> float:
    """The net's multiply-accumulates per image at ``side`` px over those at 32 px."""
    net = _net(widths, whiten_kernel)
    return macs_per_image(net, side) / macs_per_image(net, FULL_SIDE)


def side_costs(cls: str | None) -> dict[int, float]:
    """Each side's step cost relative to 32 px for CPU class ``cls``: measured
    where :data:`SIDE_COSTS` has it, else the multiply-accumulates' share."""
    measured = SIDE_COSTS.get(cls or "", {})
    return {s: measured.get(s) or mac_share(s) for s in range(9, FULL_SIDE + 1)} | {FULL_SIDE: 1.0}


def schedule_cost(cfg: CifarRecipe, costs: dict[int, float]) -> float:
    """The recipe's training in 32-px epochs: each step priced at its epoch's
    side (``costs``: a side's step time over the 32-px step's), summed over
    the run's steps on the full training set, over one epoch's steps."""
    per_epoch = TRAIN_IMAGES // cfg.batch_size
    steps = epoch_steps(cfg.epochs, lambda e: per_epoch)
    return sum(n * costs[epoch_side(cfg.progressive, e, FULL_SIDE)] for e, n in enumerate(steps)) / per_epoch


def choose(requested: str, device: torch.device, cpu: dict | None = None) -> RecipeChoice:
    """The recipe a run takes: ``requested`` where it names one; for ``auto``
    the GPU's schedule on CUDA, and on a CPU the cheapest of
    :data:`CPU_RECIPES` at this CPU class's side costs (``cpu``: a
    :func:`~dawnbench_fast.hardware.machine.cpu_info` record, this machine's
    by default)."""
    if requested != AUTO:
        return RecipeChoice(requested, requested, "asked for")
    if device.type != "cpu":
        return RecipeChoice(AUTO, GPU_RECIPE, f"auto on {device.type}: the GPU's schedule (24 then 28 px, "
                            "the 2026 record's curriculum); the CPU's is not measured on a GPU")
    cls = cpu_class(cpu_info() if cpu is None else cpu)
    costs = side_costs(cls)
    recipes = {name: CifarRecipe(**RECIPES[name]) for name in CPU_RECIPES}
    priced = {name: schedule_cost(r, costs) for name, r in recipes.items()}
    best = min(priced, key=priced.__getitem__)
    measured = SIDE_COSTS.get(cls or "", {})
    unmeasured = sorted({s for r in recipes.values() for s in r.progressive if s not in measured})
    basis = (f"{cls}'s measured step costs per side" if measured else
             f"the net's arithmetic per side ({cls or 'this CPU class'} has no measured step costs)")
    if measured and unmeasured:
        basis += f" ({', '.join(map(str, unmeasured))} px: the arithmetic's share, not measured there)"
    price = f"{priced[best]:.2f} 32-px epochs of training at {basis}"
    if len(priced) == 1:
        return RecipeChoice(AUTO, best, f"auto on the CPU: the one schedule at the accuracy bar so far, "
                            f"{price}")
    others = ", ".join(f"{n} {c:.2f}" for n, c in priced.items() if n != best)
    return RecipeChoice(AUTO, best, f"auto on the CPU: the cheapest schedule at the accuracy bar, {price} "
                        f"(against {others})")
