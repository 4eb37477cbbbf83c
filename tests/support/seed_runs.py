"""A warm-up and then a few seeds of a tiny CIFAR-10 config through the
loop's own train_epoch, one state shared by all as the command shares it
(cifar.task.shared_tasks): each seed's per-step losses, final weights and step record. With a
``recorder``, the plan is made a GPU's (captured, with its variants) and
its graphs are recorded by that stand-in (support/recorders.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch

from dawnbench_fast.cifar import Config
from dawnbench_fast.cifar.task import shared_tasks
from dawnbench_fast.training.train import train_epoch, warm_up
from support.cifar_data import cifar_dir
from support.recorders import graphs_recorded_by

TINY = dict(subset=200, eval_subset=100, batch_size=100, epochs=2, whiten_images=100, progressive=(24,),
            whiten_bias_epochs=0.5, average_from=2, widths=(16, 32, 32), cutout=4, brightness=0.1,
            precision="fp32", kernels="torch", download=False, seed=99)


@dataclasses.dataclass
class SeedRuns:
    losses: list[list[float]]  # per seed, each step's summed loss
    weights: list[dict[str, torch.Tensor]]  # per seed, the final state_dict
    records: list[dict]  # per seed, run.json's step
    tasks: list[Any]  # per seed, its task (after its last step)


def seed_runs(capture: str, seeds: tuple[int, ...], recorder: Any = None, self_test: bool = True,
              after_init: Callable[[Any], None] | None = None, **overrides: Any) -> SeedRuns:
    """``capture`` as ``--set capture``; ``recorder`` records the plan's
    graphs (support/recorders.py); ``after_init(task)`` runs after each seed's init."""
    with pytest.MonkeyPatch.context() as patch:
        if recorder is not None:
            graphs_recorded_by(patch, recorder, self_test)
        cfg = Config(**{**TINY, "data_dir": str(cifar_dir()), "capture": capture, **overrides})
        base = cfg.build_task(torch.device("cpu"))
        make = shared_tasks(base.data, base.device, base.backend)
        warm_up(make(dataclasses.replace(cfg, seed=99)))
        out = SeedRuns([], [], [], [])
        for seed in seeds:
            task = make(dataclasses.replace(cfg, seed=seed))
            task.init_model()
            if after_init is not None:
                after_init(task)
            per_step: list[float] = []
            step = task.train_step

            def recording(*batch, step=step, per_step=per_step):
                loss = step(*batch)
                per_step.append(loss.total.item())
                return loss

            task.train_step = recording
            for epoch in range(len(task.epoch_steps)):
                train_epoch(task, epoch)
            out.losses.append(per_step)
            out.weights.append({k: v.clone() for k, v in task.model.state_dict().items()})
            out.records.append(task.step_record())
            out.tasks.append(task)
        return out


def same_weights(a: list[dict], b: list[dict]) -> list[str]:
    """The names of the tensors that differ between two runs' final weights (none: bit for bit)."""
    return [f"seed {i}: {k}" for i, (x, y) in enumerate(zip(a, b, strict=True)) for k in x
            if not torch.equal(x[k], y[k])]
