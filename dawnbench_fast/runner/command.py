"""The run command every task shares: from parsed flags to a config, the
process set-up (threads, device, the torchrun group), the data loaded under
its own phase, then either a profile of a few steps (``--profile-steps``) or
the seeds through the seed driver (dawnbench_fast.runner.runs). A task's
CLI (dawnbench_fast.cifar.cli, dawnbench_fast.imagenet.cli) says only what is
its own: how to build its config, resolve its kernels, load its data, make
its task and describe its recipe.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dawnbench_fast.config import fields
from dawnbench_fast.execution.distributed import World
from dawnbench_fast.runner import cli
from dawnbench_fast.runner.runs import Recipe, check_resumed_records, profile_steps, run_seeds, warm_up_run
from dawnbench_fast.training.task import Task
from dawnbench_fast.training.train import Phases


@dataclass(frozen=True)
class TaskCommand:
    """What a task's command line brings to :func:`run`."""

    config_from_args: Callable[[argparse.Namespace], Any]
    # ``--kernels`` as a concrete backend, after the process set-up (the device is known)
    resolve_backend: Callable[[Any, torch.device], str]
    # the data in memory (timed as ``data_load``, outside the clock); this rank's view under torchrun
    load_data: Callable[[Any, torch.device, World], Any]
    make_task: Callable[[Any, Any, torch.device, str], Task]
    recipe: Callable[[Any, Any, torch.device, str, argparse.Namespace], Recipe]
    # process-wide switches the config sets before anything runs (CIFAR: the conv weight-gradient policy)
    prepare: Callable[[Any], None] | None = None


def run(command: TaskCommand, args: argparse.Namespace) -> int:
    """Run a training command: ``--list-fields``, ``--show-config``, ``--profile-steps N`` or the seeds."""
    if args.list_fields:  # reads nothing and writes nothing: no --out check
        print(fields.listing(command.config_from_args(args)))
        return 0
    cli.check_run_args(args)
    cfg = command.config_from_args(args)
    if args.show_config:
        print(cli.json_dumps(dataclasses.asdict(cfg)))
        return 0
    held = cli.claim_out(args)  # --out is this run's from here, before anything is written
    try:
        return _run_claimed(command, args, cfg)
    finally:
        if held is not None:
            held.release()


def _run_claimed(command: TaskCommand, args: argparse.Namespace, cfg: Any) -> int:
    cfg, device, w = cli.start_run(cfg)  # under torchrun: this rank's device, the group joined
    cli.check_single_process(args, w)
    if args.resume:  # what it reads back, before the data is read or anything is trained or written
        check_resumed_records(cfg, args)
    if command.prepare is not None:
        command.prepare(cfg)
    backend = command.resolve_backend(cfg, device)
    phases = Phases(device)
    with phases.timed("data_load"):
        data = command.load_data(cfg, device, w)
    if args.profile_steps:
        task, warm = profiled_task(command, cfg, data, device, backend, args)
        report_dir = profile_steps(task, args.profile_steps, Path(args.out) / "profile", args.profile_timer,
                                   warm)
        print(f"roofline report written to {report_dir}/")
        return 0
    return run_seeds(command.recipe(cfg, data, device, backend, args), cfg, args, device, backend,
                     phases.seconds["data_load"])


def profiled_task(command: TaskCommand, cfg: Any, data: Any, device: torch.device, backend: str,
                  args: argparse.Namespace) -> tuple[Any, Callable[[], None] | None]:
    """The task ``--profile-steps`` profiles, and the warm-up to run first.

    On CUDA, the step the trainer times: compiled and (CIFAR) replayed as
    CUDA graphs, after the trainer's own warm-up on a task that shares its
    state (the graphs are captured there). Its kernels are launched by the
    graphs, not by ops, so the report's per-op FLOPs stay unlinked; the
    device timeline (roofline/timeline.py) gives its kernel time, idle time,
    launches and each kernel's share. ``--set capture=off --no-compile``
    profiles the eager step op by op instead. On the CPU, the eager step:
    the roofline counts ops, which a compiled region hides, so compile stays
    off unless asked for."""
    if device.type == "cuda":
        recipe = command.recipe(cfg, data, device, backend, args)
        return recipe.make_task(cfg), lambda: warm_up_run(recipe.make_task, cfg)
    prof_cfg = dataclasses.replace(cfg, compile="off") if cfg.compile == "auto" else cfg
    return command.make_task(prof_cfg, data, device, backend), None
