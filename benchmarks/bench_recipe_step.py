"""Training-step time of named recipes (and variants), interleaved, on the CPU:
what a recipe lever costs or saves per image before any full run.

    python benchmarks/bench_recipe_step.py dawnbench_fast hiverge hiverge:act=gelu --rounds 5

An arm is ``RECIPE[:field=value,...]`` (the ``--set`` fields on top of the
named recipe). Each arm gets its own trainer at its recipe's batch size and two
warm-up steps; then the rounds time one step of every arm in turn, so a drift
of the machine's speed reaches every arm alike. Printed per arm: the median
step, seconds per 1,000 images, and the training phase that the recipe's
step count implies (steps x median step). Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

import torch

from dawnbench_fast.cifar import RECIPES, Config, Trainer, apply_overrides
from dawnbench_fast.data.cifar10 import load_cifar10
from dawnbench_fast.data.cifar10_device import prepare_data
from dawnbench_fast.runtime import configure_process
from dawnbench_fast.task import steps_in

DATA = os.environ.get("DAWNBENCH_DATA", os.path.join(os.path.dirname(__file__), "..", "..",
                                                     "shared", "data", "cifar10"))
FULL_TRAIN = 50_000


def arm_config(arm: str) -> Config:
    """``RECIPE[:field=value,...]`` as a config (kernels: cpu)."""
    name, _, sets = arm.partition(":")
    cfg = dataclasses.replace(Config(), **RECIPES[name], kernels="cpu")
    return apply_overrides(cfg, [s for s in sets.split(",") if s])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("arms", nargs="+", help="RECIPE[:field=value,...], e.g. hiverge:act=gelu")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    configure_process(a.threads)
    ds = load_cifar10(DATA, allow_download=False)
    trainers, batches = {}, {}
    for arm in a.arms:
        cfg = arm_config(arm)
        cfg = dataclasses.replace(cfg, subset=cfg.batch_size * 3)
        t = Trainer(cfg, prepare_data(ds, cfg, torch.device("cpu")), torch.device("cpu"), "cpu")
        t.init_model()
        batches[arm] = list(t.epoch_batches(0))
        for b in batches[arm][:2]:  # warm-up: oneDNN primitives, allocator growth
            t.train_step(*b)
        trainers[arm] = t
    times: dict[str, list[float]] = {arm: [] for arm in a.arms}
    for _ in range(a.rounds):
        for arm, t in trainers.items():
            t0 = time.perf_counter()
            t.train_step(*batches[arm][2])
            times[arm].append(time.perf_counter() - t0)
    print(f"{'arm':40s} {'batch':>5s} {'step s':>7s} {'s/1k img':>8s} {'steps':>5s} {'train s':>8s}")
    for arm, t in trainers.items():
        cfg, med = t.cfg, statistics.median(times[arm])
        steps = steps_in(cfg.epochs, FULL_TRAIN // cfg.batch_size)
        print(f"{arm:40s} {cfg.batch_size:5d} {med:7.3f} {1000 * med / cfg.batch_size:8.3f} "
              f"{steps:5d} {steps * med:8.1f}")
    print(f"threads {torch.get_num_threads()}, rounds {a.rounds} (median); steps on the full "
          f"{FULL_TRAIN:,} training images")


if __name__ == "__main__":
    main()
