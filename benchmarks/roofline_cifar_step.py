"""Roofline of the CIFAR net's training step on this machine.

    python benchmarks/roofline_cifar_step.py --out docs/roofline_cifar_cpu

Builds the step the way the CPU recipe runs it (CifarNet, bf16 autocast,
channels_last, batch 512, summed label-smoothed cross-entropy, Nesterov SGD),
measures this CPU's peaks right before (so that both see the same machine
load), profiles ``--steps`` steps after ``--warmup`` and writes the trace and
the report set, plus conditions.json (threads, load averages before and after,
peaks). Inputs are random normalised images: FLOPs and bytes do not depend on
the pixel values. For real training steps of the full recipe (Muon, data
pipeline) use ``python -m dawnbench_fast.cifar --profile-steps N``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F

from dawnbench_fast import roofline
from dawnbench_fast.models.cifar_net import CifarNet, macs_per_image
from dawnbench_fast.roofline.cpu_peaks import cpu_peaks


def build_step(batch: int, bf16: bool, seed: int = 0):
    torch.manual_seed(seed)
    model = CifarNet().to(memory_format=torch.channels_last)
    model.init_whitening(torch.randn(500, 3, 32, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.85, nesterov=True,
                          weight_decay=5e-4 * batch)
    x = torch.randn(batch, 3, 32, 32).to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,))

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(x)
        loss = F.cross_entropy(out.float(), y, label_smoothing=0.2, reduction="sum")
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="roofline_cifar_cpu", help="report folder")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fp32", action="store_true", help="no bf16 autocast")
    ap.add_argument("--timed-steps", type=int, default=3,
                    help="steps timed without the profiler after profiling (0 = skip)")
    ap.add_argument("--cached-peaks", action="store_true",
                    help="use the cached CPU peaks instead of re-measuring them now")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    peaks = cpu_peaks(refresh=not args.cached_peaks, budget_s=1.0)
    step, model = build_step(args.batch_size, not args.fp32)
    t0 = time.perf_counter()
    out = roofline.profile_training(step, args.steps, args.out, warmup=args.warmup, device="cpu")
    wall = time.perf_counter() - t0
    # the same step without the profiler: the wall-clock rate a user gets
    times = []
    for _ in range(args.timed_steps):
        t1 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t1)
    load_after = os.getloadavg()
    rep = json.loads((out / "report.json").read_text())
    t = rep["totals"]
    step_s = t["op_time_per_step_us"] * 1e-6
    wall_step = min(times) if times else None
    unprofiled = None
    if wall_step:
        unprofiled = {
            "best_step_s": wall_step,
            "step_s": times,
            "img_per_s": args.batch_size / wall_step,
            "flops_per_s": t["flops_per_step"] / wall_step,
            "fraction_of_peak": t["flops_per_step"] / wall_step / t["main_peak_flops_per_s"],
        }
    conditions = {
        "command": "python benchmarks/roofline_cifar_step.py " + " ".join(argv or []),
        "threads": args.threads,
        "batch_size": args.batch_size,
        "bf16_autocast": not args.fp32,
        "steps": args.steps,
        "warmup": args.warmup,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "wall_s_including_warmup_and_reporting": wall,
        "torch": torch.__version__,
        "peaks": peaks.to_dict(),
        "analytic_forward_macs_per_image": macs_per_image(model),
        "unprofiled": unprofiled,
    }
    (out / "conditions.json").write_text(json.dumps(conditions, indent=1))
    print(f"op time per step {step_s * 1e3:.1f} ms = {args.batch_size / step_s:.0f} img/s; "
          f"{t['flops_per_step'] / 1e9:.1f} GFLOP/step "
          f"({t['flops_per_step'] / args.batch_size / (2 * macs_per_image(model)):.2f}x the forward); "
          f"{t['flops_per_s'] / 1e9:.1f} GFLOP/s = {t['fraction_of_peak']:.1%} of the "
          f"{t['main_precision']} peak; counted {t['coverage']:.2%} of op time; "
          f"load {load_before[0]:.2f} -> {load_after[0]:.2f}")
    if unprofiled:
        print(f"without the profiler: best step {wall_step * 1e3:.1f} ms = "
              f"{unprofiled['img_per_s']:.0f} img/s, {unprofiled['flops_per_s'] / 1e9:.1f} GFLOP/s "
              f"= {unprofiled['fraction_of_peak']:.1%} of the {t['main_precision']} peak")
    print(f"report: {out}/report.txt, {out}/roofline.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
