"""Training-step time of named recipes (and variants) on the CPU, under
pytest-benchmark: what a recipe lever costs or saves per image before any
full run.

    BENCH_ARMS="dawnbench_fast hiverge hiverge:act=gelu" python -m pytest benchmarks/bench_recipe_step.py
    python benchmarks/bench_recipe_step.py dawnbench_fast hiverge hiverge:act=gelu --rounds 5   # the same

An arm is ``RECIPE[:field=value,...]`` (the ``--set`` fields on top of the
named recipe; ``wgrad=METHOD`` forces the conv weight-gradient method of
csrc/conv_group.py, e.g. ``hiverge:wgrad=aten`` against ``hiverge``'s
default; ``dgrad=aten`` the before-pool data gradient's (default ``pooled``, ``pooled-fma`` its FMA form),
csrc/conv_group_dgrad.py; ``handoff=off`` the first conv and the fused pool
as two autograd nodes with the full-size dY between them,
csrc/conv_group.py's POOL_HANDOFF; ``amx=off`` the default without our AMX
weight gradient, as on a CPU without AMX tiles, csrc/conv_group_wgrad.py);
``BENCH_ARMS`` lists them, whitespace-separated (default ``dawnbench_fast
hiverge``). An arm times epoch 0's step: with a resolution curriculum (the
default's 24, 24, 24, 28, 28, 28 px) its first side; ``progressive=28`` or
``progressive=`` (empty: 32 px) time the others. Each arm gets its own trainer at its recipe's
batch size and two warm-up steps, then ``BENCH_ROUNDS`` timed steps (default
5) on the same batch; each arm's rounds run back to back (the script before
alternated the arms within each round, so that a drift of the machine's
speed reached every arm alike: compare arms within one run). ``extra_info``
per arm: batch, seconds per 1,000 images and the training phase that the
recipe's step count implies (steps x median step). The step makes its own
batch on the device from its keys (cifar/step.py), so its time includes the
augmentation; ``test_recipe_batches`` times that part alone for the same arms
(the epoch's keys, then each key's batch: augmentation, jitter, side), per step. Needs CIFAR-10
(``DAWNBENCH_DATA``; skipped without it). Run it on an otherwise idle machine.
In the script form, give pytest's options with their value in one argument
(``-khiverge``, ``--benchmark-compare=0001``): a separate value would be read
as an arm.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys

import pytest
import torch
from knobs import env_int, env_words

from dawnbench_fast import dispatch
from dawnbench_fast.cifar import RECIPES, CifarTask, Config
from dawnbench_fast.cifar.recipe import apply_overrides
from dawnbench_fast.config.precision import with_resolved_precision
from dawnbench_fast.csrc import conv_group, conv_group_dgrad
from dawnbench_fast.data.cifar10_device import prepare_data
from dawnbench_fast.training.task import steps_in

ARMS = env_words("BENCH_ARMS", "dawnbench_fast hiverge")
ROUNDS = env_int("BENCH_ROUNDS", 5)
FULL_TRAIN = 50_000


KNOBS = ("wgrad", "dgrad", "handoff", "amx")  # an arm's settings that are no recipe field


def arm_config(arm: str) -> tuple[Config, str | None, str | None, str | None, str | None]:
    """``RECIPE[:field=value,...]`` as a config (kernels: cpu), the forced
    weight-gradient method (``wgrad=``, else None), the before-pool data
    gradient's method (``dgrad=aten|pooled|pooled-fma``, csrc/conv_group_dgrad.py, else
    None: its default), ``handoff=on|off`` and ``amx=on|off`` (else None: on). A value may
    hold commas (``widths=48,256,256``): a new field starts only at ``,name=``."""
    name, _, sets = arm.partition(":")
    cfg = dataclasses.replace(Config(), **RECIPES[name], kernels="cpu")
    fields = [s for s in re.split(r",(?=\w+=)", sets) if s]
    forced = {k: [f.partition("=")[2] for f in fields if f.startswith(f"{k}=")] for k in KNOBS}
    cfg = apply_overrides(cfg, [f for f in fields if not f.startswith(tuple(f"{k}=" for k in KNOBS))])
    return cfg, *(v[-1] if v else None for v in forced.values())


def arm_task(cifar10, arm: str, monkeypatch) -> CifarTask:
    """The arm's trainer (its kernels and settings forced), initialised, on
    three steps' images."""
    if (reason := dispatch.unavailable_reason("cpu", torch.device("cpu"))) is not None:
        pytest.skip(f"--kernels cpu unavailable here: {reason}")
    cfg, wgrad, dgrad, handoff, amx = arm_config(arm)
    monkeypatch.setattr(conv_group, "FORCE", wgrad)
    monkeypatch.setattr(conv_group, "_CHOICE", {})  # this arm's own default choices
    if amx == "off":
        monkeypatch.setattr(conv_group.wgrad, "amx_supported", lambda: False)
    monkeypatch.setattr(conv_group, "POOL_HANDOFF", handoff != "off")
    conv_group_dgrad.set_dgrad_method(dgrad)  # None: the default (or DAWNBENCH_DGRAD)
    n = cfg.batch_size * 3  # three steps' images; the whitening sample from at most those
    cfg = dataclasses.replace(cfg, subset=n, whiten_images=min(n, cfg.whiten_images))
    cfg, _ = with_resolved_precision(cfg, torch.device("cpu"))
    t = CifarTask(cfg, prepare_data(cifar10, cfg, torch.device("cpu")), torch.device("cpu"), "cpu")
    t.init_model()
    return t


@pytest.mark.parametrize("arm", ARMS)
def test_recipe_step(benchmark, cifar10, arm, monkeypatch):
    t = arm_task(cifar10, arm, monkeypatch)
    cfg, wgrad = t.cfg, conv_group.FORCE
    batches = list(t.epoch_batches(0))
    for b in batches[:2]:  # warm-up: oneDNN primitives, allocator growth
        t.train_step(*b)
    benchmark.group = "recipe training step (--kernels cpu)"
    benchmark.pedantic(lambda: t.train_step(*batches[2]), rounds=ROUNDS, iterations=1)
    med = benchmark.stats.stats.median
    steps = steps_in(cfg.epochs, FULL_TRAIN // cfg.batch_size)
    side = batches[2][0].side  # epoch 0's: the first side of a resolution curriculum
    benchmark.extra_info.update(
        batch=cfg.batch_size, side=side, seconds_per_1k_images=1000 * med / cfg.batch_size, steps=steps,
        # steps x median where every step is this one (None with a curriculum: the sides differ)
        train_phase_implied_s=None if cfg.progressive else steps * med,
        threads=torch.get_num_threads(), precision=cfg.precision,
        wgrad_methods=conv_group.chosen_methods() if wgrad is None else {"forced": wgrad})


@pytest.mark.parametrize("arm", ARMS)
def test_recipe_batches(benchmark, cifar10, arm, monkeypatch):
    """What the step's batches cost within it: an epoch of three steps'
    keys from ``epoch_batches`` (the order) and each key's batch (the keyed
    augmentation parameters, the augment op, the jitter, the epoch's side),
    per step."""
    t = arm_task(cifar10, arm, monkeypatch)

    def batches() -> list[torch.Tensor]:
        return [t.batch_of(key) for key, in t.epoch_batches(0)]

    batches()  # warm-up
    benchmark.group = "recipe step's batches (--kernels cpu)"
    benchmark.pedantic(batches, rounds=ROUNDS, iterations=1)
    benchmark.extra_info.update(batch=t.cfg.batch_size, steps_per_round=3,
                                seconds_per_step=benchmark.stats.stats.median / 3,
                                threads=torch.get_num_threads())


def main(argv: list[str] | None = None) -> int:
    import script_entry

    from dawnbench_fast.execution.runtime import set_threads

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="other arguments go to pytest")
    p.add_argument("arms", nargs="*", help="RECIPE[:field=value,...], e.g. hiverge:act=gelu (BENCH_ARMS)")
    p.add_argument("--rounds", type=int, help="timed steps per arm (BENCH_ROUNDS)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0 = PyTorch's default)")
    args, rest = p.parse_known_args(argv)
    set_threads(args.threads)
    settings = {"BENCH_ARMS": " ".join(args.arms) or None, "BENCH_ROUNDS": args.rounds}
    return script_entry.run(__file__, settings, pytest_args=rest)


if __name__ == "__main__":
    sys.exit(main())
