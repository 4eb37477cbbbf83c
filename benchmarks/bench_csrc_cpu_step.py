"""Effect of csrc's bn_act on the whole CPU training step of the CIFAR recipe:
the ``cpu`` backend as registered (csrc bn_act) against the same backend with
the torch reference bn_act swapped back in; everything else identical.

    python -m pytest benchmarks/bench_csrc_cpu_step.py [--benchmark-autosave]
    python benchmarks/bench_csrc_cpu_step.py [--batch 500] [--rounds 5]   # the same

``BENCH_BATCH`` images per step (default 500), ``BENCH_ROUNDS`` timed steps
(default 5) after two warm-up steps (oneDNN primitives, allocator growth),
the same batch every round. Each variant's rounds run back to back (the
script before alternated them within each round). Needs CIFAR-10
(``DAWNBENCH_DATA``) and the C++ build; skipped without either.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import pytest
import torch
from knobs import env_int

from dawnbench_fast import dispatch
from dawnbench_fast.cifar import CifarTask, Config
from dawnbench_fast.config.precision import with_resolved_precision
from dawnbench_fast.data.cifar10_device import prepare_data
from dawnbench_fast.models.layers import bn_act as torch_bn_act

BATCH = env_int("BENCH_BATCH", 500)
ROUNDS = env_int("BENCH_ROUNDS", 5)


@pytest.mark.parametrize("bn_act", ["csrc", "torch"])
def test_train_step(benchmark, cifar10, native_build, bn_act):
    if (reason := dispatch.unavailable_reason("cpu", torch.device("cpu"))) is not None:
        pytest.skip(f"--kernels cpu unavailable here: {reason}")
    # the 32-px step (the recipe's first epochs train smaller: progressive)
    cfg = dataclasses.replace(Config(), subset=BATCH * 3, batch_size=BATCH, progressive=(), kernels="cpu",
                              whiten_images=min(BATCH * 3, Config().whiten_images))
    cfg, _ = with_resolved_precision(cfg, torch.device("cpu"))  # auto made concrete, as a run does
    t = CifarTask(cfg, prepare_data(cifar10, cfg, torch.device("cpu")), torch.device("cpu"), "cpu")
    t.init_model()
    if bn_act == "torch":
        for g in t.model.groups:
            g.bn_act = torch_bn_act
    batches = list(t.epoch_batches(0))
    for b in batches[:2]:  # warm-up: oneDNN primitives, allocator growth
        t.train_step(*b)
    benchmark.group = f"cpu backend training step, batch {BATCH}: csrc bn_act vs torch bn_act"
    benchmark.extra_info["loadavg_before"] = os.getloadavg()[0]
    benchmark.pedantic(lambda: t.train_step(*batches[2]), rounds=ROUNDS, iterations=1)
    benchmark.extra_info.update(
        loadavg_after=os.getloadavg()[0], threads=torch.get_num_threads(), precision=cfg.precision,
        images_per_s=BATCH / benchmark.stats.stats.median,
        ops=dispatch.op_table("cpu", ["augment", "conv_group", "bn_act"]))


def main(argv: list[str] | None = None) -> int:
    import script_entry

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="other arguments go to pytest")
    ap.add_argument("--batch", type=int, help="images per step (BENCH_BATCH)")
    ap.add_argument("--rounds", type=int, help="timed steps (BENCH_ROUNDS)")
    args, rest = ap.parse_known_args(argv)
    return script_entry.run(__file__, {"BENCH_BATCH": args.batch, "BENCH_ROUNDS": args.rounds},
                            pytest_args=rest)


if __name__ == "__main__":
    sys.exit(main())
