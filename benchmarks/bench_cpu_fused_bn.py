"""The fused memory-bound passes of the ``cpu`` backend's conv group, old vs
new in the same process, interleaved (csrc/cpu_fused_bn.cpp, pool_bn_act.py):

- ops: at the CIFAR net's six BN layers (batch ``--batch``, bf16
  channels_last): after conv1, ATen's max-pool + csrc bn_act with the old
  loops ("old") against the fused pool_bn_act ("new"); after conv2, csrc
  bn_act with the old loops against the vectorised NHWC loops. Forward and
  backward; each new pass's achieved GB/s (its minimal bytes / its time)
  against the copy bandwidth measured in the same run.
- group: each conv group forward + backward (the cpu backend's conv_group).
- step: the recipe's whole training step (``--kernels cpu``).

    python benchmarks/bench_cpu_fused_bn.py --batch 2000 --reps 5 [--what ops,group,step]

"old" = ``conv_cpu.FUSED_POOL = False``; in the ops rows also the
extension's NHWC bn_act loops off against on (``set_nhwc_kernels_enabled``;
the group and step rows leave them at the default, off, as the cpu backend
runs); everything else identical. Medians of
``--reps`` rounds, old and new alternating within each round.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

from dawnbench_fast.csrc import native, ops
from dawnbench_fast.csrc.pool_bn_act import pool_bn_act
from dawnbench_fast.models import conv_cpu
from dawnbench_fast.models.layers import BatchNorm, ConvGroup

DATA = os.environ.get("DAWNBENCH_DATA", os.path.join(os.path.dirname(__file__), "..", "..",
                                                     "shared", "data", "cifar10"))
# (channels, side of the conv output) per group: pool after conv1, then conv2's BN.
GROUPS = [(24, 64, 31), (64, 256, 15), (256, 256, 7)]


NHWC_DEFAULT = native.load().nhwc_kernels_enabled()  # what the cpu backend runs


def set_new(on: bool, loops: bool) -> None:
    """new/old: the fused pool op on/off; ``loops``: also the NHWC bn_act loops
    (else they stay at the extension's default, as the cpu backend runs)."""
    conv_cpu.FUSED_POOL = on
    native.load().set_nhwc_kernels_enabled(on if loops else NHWC_DEFAULT)


def interleaved(fns: dict, reps: int, loops: bool = False) -> dict[str, list[float]]:
    for name, fn in fns.items():
        set_new(name == "new", loops)
        fn()  # warm-up (first-touch pages, oneDNN primitives)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            set_new(name == "new", loops)
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    set_new(True, loops)
    return times


def copy_bandwidth() -> float:
    src = torch.randn(32 * 2**20)
    dst = torch.empty_like(src)
    best = min(_timed(lambda: dst.copy_(src)) for _ in range(7))
    return 2 * src.numel() * 4 / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _pass_rates(x: torch.Tensor, y_numel: int, pool: bool, fwd: bool, item: int) -> list[float]:
    """Minimal bytes of each pass of the last native call / its time (the
    backward's passes after a forward + backward)."""
    full, small = x.numel() * item, y_numel * item
    if fwd:
        nbytes = [full + small + y_numel, 2 * small] if pool else [full, 2 * full]
    else:
        nbytes = [2 * small, 2 * small + y_numel + full] if pool else [2 * full, 3 * full]
    mod = native.load()
    return [b / max(mod.nhwc_last_pass_seconds(i), 1e-9) for i, b in enumerate(nbytes)]


def bench_ops(batch: int, reps: int) -> list[dict]:
    rows = []
    gen = torch.Generator().manual_seed(0)
    for _cin, c, side in GROUPS:
        for pool in (True, False):
            hw = side if pool else side // 2
            x = (torch.randn(batch, c, hw, hw, generator=gen) + 0.3).bfloat16()
            x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
            bn = BatchNorm(c)
            old = (lambda x, bn=bn: ops.bn_act(F.max_pool2d(x, 2), bn, "gelu")) if pool else \
                (lambda x, bn=bn: ops.bn_act(x, bn, "gelu"))
            new = (lambda x, bn=bn: pool_bn_act(x, bn, "gelu")) if pool else old
            y = new(x)
            g = torch.randn(y.shape, generator=gen).bfloat16().contiguous(
                memory_format=torch.channels_last)
            res = {}
            for label, fns in (("fwd", {"old": lambda o=old, x=x: o(x.detach()),
                                         "new": lambda n=new, x=x: n(x.detach())}),
                               ("fwd+bwd", {"old": lambda o=old, x=x, g=g: o(x).backward(g),
                                            "new": lambda n=new, x=x, g=g: n(x).backward(g)})):
                t = interleaved(fns, reps, loops=True)
                fns["new"]()  # the last native call: this direction's two passes
                rates = _pass_rates(x, y.numel(), pool, label == "fwd", 2)
                res[label] = {"median_s": {k: statistics.median(v) for k, v in t.items()},
                              "new_pass_gbs": [r / 1e9 for r in rates]}
            x.grad = None
            rows.append({"layer": f"{'pool+' if pool else ''}bn+gelu {c}x{hw}x{hw}", "batch": batch,
                         **res})
    return rows


def bench_groups(batch: int, reps: int) -> list[dict]:
    rows = []
    gen = torch.Generator().manual_seed(1)
    for cin, cout, side in GROUPS:
        grp = ConvGroup(cin, cout)
        x = torch.randn(batch, cin, side, side, generator=gen).bfloat16()
        x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
        groups = {k: copy.deepcopy(grp) for k in ("old", "new")}
        for gg in groups.values():
            gg.bn_act = ops.bn_act

        def step(gg=None, x=x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = conv_cpu.conv_group_cpu(gg, x)
            y.float().sum().backward()

        t = interleaved({k: (lambda gg=gg: step(gg)) for k, gg in groups.items()}, reps)
        rows.append({"group": f"{cin}->{cout} @ {side}", "batch": batch,
                     "median_s": {k: statistics.median(v) for k, v in t.items()}})
    return rows


def bench_step(batch: int, reps: int) -> dict:
    from dawnbench_fast.cifar import Config, Trainer, prepare_data
    from dawnbench_fast.data.cifar10 import load_cifar10

    cfg = dataclasses.replace(Config(), subset=batch * 3, batch_size=batch, kernels="cpu")
    data = prepare_data(load_cifar10(DATA, allow_download=False), cfg, torch.device("cpu"))
    t = Trainer(cfg, data, torch.device("cpu"), "cpu")
    t.init_model()
    batches = list(t.epoch_batches(0))
    for b in batches[:2]:
        t.train_step(*b)
    times = interleaved({k: (lambda: t.train_step(*batches[2])) for k in ("old", "new")}, reps)
    return {"batch": batch, "median_s": {k: statistics.median(v) for k, v in times.items()},
            "times": times}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--what", default="ops,group,step")
    ap.add_argument("--json")
    a = ap.parse_args()
    out = {"threads": torch.get_num_threads(), "load_before": os.getloadavg()[0],
           "vectorised": native.load().nhwc_kernels_vectorised(),
           "copy_gbs": copy_bandwidth() / 1e9}
    print(f"threads {out['threads']}, AVX-512 loops {out['vectorised']}, copy "
          f"{out['copy_gbs']:.1f} GB/s, load {out['load_before']:.2f}")
    if "ops" in a.what:
        out["ops"] = bench_ops(a.batch, a.reps)
        for r in out["ops"]:
            for k in ("fwd", "fwd+bwd"):
                m = r[k]["median_s"]
                rates = ", ".join(f"{v:.1f}" for v in r[k]["new_pass_gbs"])
                print(f"  {r['layer']:26s} {k:7s} old {m['old'] * 1e3:7.1f} ms  new {m['new'] * 1e3:7.1f} ms"
                      f"  x{m['old'] / m['new']:.2f}  new passes GB/s [{rates}]")
    if "group" in a.what:
        out["group"] = bench_groups(a.batch, a.reps)
        for r in out["group"]:
            m = r["median_s"]
            print(f"  group {r['group']:14s} fwd+bwd old {m['old'] * 1e3:7.1f} ms  new "
                  f"{m['new'] * 1e3:7.1f} ms  x{m['old'] / m['new']:.2f}")
    if "step" in a.what:
        out["step"] = bench_step(a.batch, a.reps)
        m = out["step"]["median_s"]
        print(f"  training step (batch {a.batch}) old {m['old']:.3f} s  new {m['new']:.3f} s  "
              f"x{m['old'] / m['new']:.3f}")
    out["load_after"] = os.getloadavg()[0]
    print(f"load average after: {out['load_after']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
