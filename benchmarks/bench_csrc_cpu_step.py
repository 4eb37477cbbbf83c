"""Effect of csrc's bn_act on the whole CPU training step of the CIFAR recipe:
the ``cpu`` backend as registered (csrc bn_act) against the same backend with
the torch reference bn_act swapped back in; everything else identical.

    python benchmarks/bench_csrc_cpu_step.py [--batch 500] [--rounds 5]

The two variants alternate within each round on the same batch; medians.
Needs the CIFAR-10 binary files (``DAWNBENCH_DATA`` or ../shared/data/cifar10).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

import torch

from dawnbench_fast import dispatch
from dawnbench_fast.cifar import Config, Trainer, prepare_data
from dawnbench_fast.data.cifar10 import load_cifar10
from dawnbench_fast.models.layers import bn_act as torch_bn_act

DATA = os.environ.get("DAWNBENCH_DATA", os.path.join(os.path.dirname(__file__), "..", "..",
                                                     "shared", "data", "cifar10"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    cfg = dataclasses.replace(Config(), subset=a.batch * 3, batch_size=a.batch, kernels="cpu")
    data = prepare_data(load_cifar10(DATA, allow_download=False), cfg, torch.device("cpu"))
    backend = dispatch.resolve_backend("cpu", "cpu")
    served = dispatch.op_table(backend, ["augment", "conv_group", "bn_act"])
    trainers = {}
    for name in ("csrc bn_act", "torch bn_act"):
        t = Trainer(cfg, data, torch.device("cpu"), backend)
        t.init_model()
        if name == "torch bn_act":
            for g in t.model.groups:
                g.bn_act = torch_bn_act
        batches = list(t.epoch_batches(0))
        for b in batches[:2]:  # warm-up (oneDNN primitives, wgrad choices)
            t.train_step(*b)
        trainers[name] = (t, batches[2])
    times: dict[str, list[float]] = {k: [] for k in trainers}
    load = os.getloadavg()[0]
    for _ in range(a.rounds):
        for name, (t, b) in trainers.items():
            s = time.perf_counter()
            t.train_step(*b)
            times[name].append(time.perf_counter() - s)
    print(f"cpu backend ops: {served}; batch {a.batch}; threads {torch.get_num_threads()}; "
          f"load average {load:.2f} -> {os.getloadavg()[0]:.2f}")
    base = statistics.median(times["torch bn_act"])
    for name, v in times.items():
        m = statistics.median(v)
        print(f"  {name:14s} {m * 1e3:8.1f} ms/step  {a.batch / m:7.1f} img/s  x{base / m:.3f}")


if __name__ == "__main__":
    main()
