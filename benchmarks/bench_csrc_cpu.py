"""The CPU (OpenMP) build of csrc's kernels against the existing CPU paths, on
this machine, at the CIFAR recipe's shapes.

    python benchmarks/bench_csrc_cpu.py [--batch 500] [--reps 7] [--json out.json]

- bn_act: BatchNorm (training) + GELU, forward + backward, at the six BN
  shapes of the CIFAR net (widths 64/256/256, 32 px input): ours
  (``dawnbench::csrc_bn_act_fwd/bwd``) vs the torch reference
  (``nn.BatchNorm2d`` + ``F.gelu``, oneDNN/ATen kernels), bf16 channels_last
  (the recipe's CPU setting) and fp32 NCHW.
- bn_act latency: eval mode, batch 1, the six layers of one image (what the
  DAWNBench 1-image latency runs through).
- augment: crop + flip + normalise of a batch from the padded uint8 dataset:
  ours vs the numba kernel (``data.augment_cpu``, the ``cpu`` backend's) vs
  the torch reference.

Each figure is the median of ``--reps`` repetitions after one warm-up; the
alternatives run in the same process on the same inputs, timed in turn within
each repetition (so a busy machine slows them alike). The script also records
the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np
import torch

from dawnbench_fast.csrc import native, ops
from dawnbench_fast.data import augment as A
from dawnbench_fast.models.layers import BatchNorm, bn_act

# (channels, side) of the six BN layers of CifarNet(64, 256, 256) at 32 px.
BN_SHAPES = [(64, 15), (64, 15), (256, 7), (256, 7), (256, 3), (256, 3)]


def _interleaved_medians(impls: dict, reps: int) -> dict:
    """Median seconds per implementation, the implementations timed in turn
    within each repetition so that all see the same machine load."""
    for fn in impls.values():
        fn()  # warm-up (and the first-touch page faults)
    times: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(reps):
        for name, fn in impls.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(v) for name, v in times.items()}


def bench_bn_act(batch: int, reps: int, dtype: torch.dtype, cl: bool) -> dict:
    gen = torch.Generator().manual_seed(0)
    layers = []
    for c, side in BN_SHAPES:
        x = (torch.randn(batch, c, side, side, generator=gen) + 0.5).to(dtype)
        if cl:
            x = x.contiguous(memory_format=torch.channels_last)
        g = torch.randn(x.shape, generator=gen).to(dtype)
        g = g.contiguous(memory_format=torch.channels_last) if cl else g
        layers.append((x.requires_grad_(), g, BatchNorm(c)))

    def run(fn):
        def step():
            for x, g, bn in layers:
                x.grad = None
                fn(x, bn, "gelu").backward(g)
        return step

    elems = sum(x.numel() for x, _, _ in layers)
    impls = {"torch (ATen/oneDNN)": run(bn_act), "csrc C++/OpenMP": run(ops.bn_act)}
    res = _interleaved_medians(impls, reps)
    return {"op": "bn_act fwd+bwd (gelu, training)", "dtype": str(dtype).replace("torch.", ""),
            "layout": "channels_last" if cl else "nchw", "batch": batch, "elements": elems,
            "seconds": res}


def bench_bn_act_latency(reps: int, calls: int = 200) -> dict:
    """Eval-mode bn_act at batch 1 (the DAWNBench latency path): per-call cost
    at the six BN shapes, bf16 channels_last, under no_grad."""
    gen = torch.Generator().manual_seed(0)
    layers = []
    for c, side in BN_SHAPES:
        x = torch.randn(1, c, side, side, generator=gen).to(torch.bfloat16)
        layers.append((x.contiguous(memory_format=torch.channels_last), BatchNorm(c).eval()))

    def run(fn):
        def step():
            with torch.no_grad():
                for _ in range(calls):
                    for x, bn in layers:
                        fn(x, bn, "gelu")
        return step

    res = _interleaved_medians({"torch (ATen/oneDNN)": run(bn_act),
                                "csrc C++/OpenMP": run(ops.bn_act)}, reps)
    per = {k: v / calls for k, v in res.items()}
    return {"op": "bn_act eval, six layers per image (latency path)", "batch": 1,
            "dtype": "bfloat16", "layout": "channels_last", "seconds": per}


def bench_augment(batch: int, reps: int) -> dict:
    from dawnbench_fast.data.augment_cpu import augment_cpu

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(50_000, 32, 32, 3), dtype=np.uint8)
    padded = torch.from_numpy(A.pad_reflect(images, 2))
    scale, shift = (torch.from_numpy(a) for a in A.normalisation((0.49, 0.48, 0.45),
                                                                 (0.25, 0.24, 0.26)))
    idx = torch.from_numpy(rng.permutation(50_000)[:batch])
    p = A.augment_params(0, 1, idx.numpy())
    impls = {
        "torch reference": lambda: A.augment_torch(padded, idx, p, scale, shift),
        "numba (cpu backend)": lambda: augment_cpu(padded, idx, p, scale, shift),
        "csrc C++/OpenMP": lambda: ops.augment(padded, idx, p, scale, shift),
    }
    ref = impls["torch reference"]()
    for name, fn in impls.items():
        assert torch.equal(fn(), ref), name  # same result before timing it
    res = _interleaved_medians(impls, reps)
    return {"op": "augment (translate 2 + flip, fp32 out)", "batch": batch,
            "images_per_s": {k: batch / v for k, v in res.items()}, "seconds": res}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=500, help="bn_act batch (images)")
    ap.add_argument("--aug-batch", type=int, nargs="+", default=[2000, 10_000],
                    help="augment batch sizes (images)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    native.load()  # build outside the timings if needed
    load_before = os.getloadavg()
    runs = [bench_bn_act(a.batch, a.reps, torch.bfloat16, True),
            bench_bn_act(a.batch, a.reps, torch.float32, False),
            bench_bn_act_latency(a.reps),
            *(bench_augment(b, a.reps) for b in a.aug_batch)]
    results = {
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "threads": torch.get_num_threads(), "cores": os.cpu_count(),
                    "torch": torch.__version__, "loadavg_before": load_before,
                    "loadavg_after": os.getloadavg()},
        "runs": runs,
    }
    print(f"threads {torch.get_num_threads()}, load average before {load_before[0]:.2f}, "
          f"after {results['machine']['loadavg_after'][0]:.2f}")
    for r in results["runs"]:
        base = next(iter(r["seconds"].values()))
        head = f"{r['op']} batch {r['batch']}" + (
            f" {r['dtype']} {r['layout']}" if "dtype" in r else "")
        print(head)
        for name, s in r["seconds"].items():
            extra = f"  {r['images_per_s'][name]:,.0f} img/s" if "images_per_s" in r else ""
            print(f"  {name:24s} {s * 1e3:9.3f} ms  x{base / s:5.2f} vs first{extra}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
