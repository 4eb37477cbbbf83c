"""The GPU suite's training parts (gpu_suite/suite.py): ``trainer``, our
CIFAR-10 default over several seeds in one process, and ``peer``, the
published airbench94_muon.py run unchanged beside ours in interleaved blocks.
Both read our runs back from their run.json (docs/RUN_JSON.md) and the
peer's from its console table (gpu_suite/peer_io.py).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

from tools.gpu_suite import peer_io
from tools.gpu_suite.record import Suite, run_logged, tail

# The trainer's flags in a dry run: enough steps to go through warm-up, training,
# the final TTA evaluation and the latency loop, on the CPU, in seconds.
DRY_TRAINER_FLAGS = ["--subset", "256", "--eval-subset", "128", "--epochs", "1", "--batch-size", "64",
                     "--set", "whiten_images=256", "--device", "cpu"]
DRY_LATENCY_IMAGES = 2

def trainer_command(args: argparse.Namespace, out: Path, seed: int, runs: int, dry: bool) -> list[str]:
    cmd = [sys.executable, "-m", "dawnbench_fast.cifar", "--seed", str(seed), "--runs", str(runs),
           "--out", str(out), "--overwrite", "--no-progress",
           "--latency-images", str(DRY_LATENCY_IMAGES if dry else args.latency_images)]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    return cmd + (DRY_TRAINER_FLAGS if dry else []) + list(args.trainer_args)


def run_record(path: Path) -> dict:
    """The figures of one of our runs, from its run.json (docs/RUN_JSON.md)."""
    run = json.loads(path.read_text())
    res, phases = run["result"], run["result"]["phases_seconds"]
    energy = res.get("gpu_energy_joules") or {}
    return {
        "seed": res["seed"], "final_top1": res["final_top1"], "reached_target": res["reached_target"],
        "time_to_target_s": res["tta_seconds"], "end_clock_s": res["end_clock_seconds"],
        "warmup_s": phases.get("warmup"), "data_load_s": phases.get("data_load"),
        "latency_ms": res.get("latency_ms"), "latency_images": res.get("latency_images"),
        "energy_clock_j": energy.get("clock"), "energy_run_j": energy.get("run"),
        "execution": run.get("execution"), "device": run.get("device"), "run_json": str(path),
    }


def our_runs(folder: Path) -> list[dict]:
    return sorted((run_record(p) for p in folder.rglob("run.json")), key=lambda r: r["seed"])


def stats(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "mean": None, "std": None}
    return {"n": len(values), "mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def summarise_ours(runs: list[dict], target: float) -> dict:
    reached = [r["time_to_target_s"] for r in runs if r["reached_target"]]
    return {"target": target, "runs": len(runs), "reached": len(reached),
            "time_to_target_s": stats(reached), "end_clock_s": stats([r["end_clock_s"] for r in runs]),
            "final_top1": stats([r["final_top1"] for r in runs]),
            "warmup_s": stats([r["warmup_s"] for r in runs if r["warmup_s"] is not None]),
            "energy_clock_j": stats([r["energy_clock_j"] for r in runs if r["energy_clock_j"] is not None])}


def part_trainer(suite: Suite, args: argparse.Namespace) -> None:
    """The CIFAR-10 default, ``--seeds`` seeds in one process (one compile
    warm-up, reported apart, as the published records report theirs)."""
    rec = suite.part("trainer")
    folder = suite.out / "trainer"
    cmd = trainer_command(args, folder, args.seed, 1 if suite.dry_run else args.seeds, suite.dry_run)
    rec["command"] = cmd[1:]
    rc, seconds, log = run_logged(suite, cmd, "trainer.log", suite.left())
    rec.update(exit_status=rc, wall_s=round(seconds, 1), runs=our_runs(folder))
    rec["summary"] = summarise_ours(rec["runs"], args.target)
    status = "done" if rc == 0 else ("stopped at the budget" if rc is None else "failed")
    suite.end("trainer", status, None if rc == 0 else tail(log))


def part_peer(suite: Suite, args: argparse.Namespace) -> None:
    """The published airbench94_muon.py, run unchanged on the same GPU and
    data, in blocks interleaved with ours (each block pays its compile
    warm-up once; the order alternates so that drift falls on both sides).
    The ratio is compare.py's on the CPU: the mean of our end-of-training
    clocks over the mean of the peer's ``time_seconds``."""
    rec = suite.part("peer")
    script = peer_io.STANDIN if suite.dry_run and not args.peer else Path(args.peer)
    workdir = peer_io.prepare_workdir(script, suite.out / "peer", args.data_dir, tiny=suite.dry_run)
    runs = 1 if suite.dry_run else args.peer_runs
    blocks = 1 if suite.dry_run else args.peer_blocks
    rec.update(script=str(script), standin=script == peer_io.STANDIN, workdir=str(workdir),
               runs_per_block=runs, blocks=[])
    longest = 0.0
    for b in range(blocks):
        if b and suite.left() < longest * 1.1:
            rec["note"] = f"stopped after {b} block(s): another would pass the part's budget"
            break
        t0 = time.monotonic()
        # --peer-first: the published script opens the first block (the measuring script's order)
        block = {"order": ["ours", "peer"] if (b + args.peer_first) % 2 == 0 else ["peer", "ours"]}
        rec["blocks"].append(block)
        for side in block["order"]:
            block[side] = run_side(suite, args, side, b, runs, script, workdir)
            suite.save()
        longest = max(longest, time.monotonic() - t0)
    rec["summary"] = peer_summary(rec["blocks"], args.target)
    done = all(bl.get(s, {}).get("exit_status") == 0 for bl in rec["blocks"] for s in ("ours", "peer"))
    suite.end("peer", "done" if done else "partial", None if done else "a side failed or was stopped: logs/")


PEER_START_S = 15.0  # the published script's process before its warm-up: imports, the data on the GPU


def peer_runs_that_fit(left_s: float, runs: int, warmup_s: float, run_s: float) -> int:
    """The published script's runs this block, at most ``runs``: as many as
    the time left holds after its warm-up, and at least one. A process cut
    at the budget returns no run at all (its table is printed as it goes,
    but the ratio needs whole runs), so fewer runs are better than none."""
    fit = math.floor((left_s - PEER_START_S - warmup_s) / run_s)
    return max(1, min(runs, fit))


def run_side(suite: Suite, args: argparse.Namespace, side: str, block: int, runs: int, script: Path,
             workdir: Path) -> dict:
    """One block of one side: our trainer for ``runs`` seeds, or the peer
    script with AIRBENCH_RUNS = ``runs``."""
    timeout = max(suite.left(), 1.0)
    if side == "ours":
        folder = suite.out / "peer" / f"ours_block{block}"
        cmd = trainer_command(args, folder, args.seed + block * runs, runs, suite.dry_run)
        rc, seconds, _ = run_logged(suite, cmd, f"peer_ours_block{block}.log", timeout)
        return {"exit_status": rc, "wall_s": round(seconds, 1), "runs": our_runs(folder)}
    fitted = runs if suite.dry_run else peer_runs_that_fit(timeout, runs, args.peer_warmup_s, args.peer_run_s)
    cmd = [sys.executable, str(script.resolve())]
    rc, seconds, log = run_logged(suite, cmd, f"peer_block{block}.log", timeout, cwd=workdir,
                                  env={"AIRBENCH_RUNS": str(fitted)})
    parsed = peer_io.parse_output(log.read_text(errors="replace"))
    return {"exit_status": rc, "wall_s": round(seconds, 1), "runs_asked": runs, "runs_started": fitted,
            **parsed}


def peer_summary(blocks: list[dict], target: float) -> dict:
    ours = [r for b in blocks for r in b.get("ours", {}).get("runs", [])]
    theirs = [r for b in blocks for r in b.get("peer", {}).get("runs", [])]
    mine, peer_t = stats([r["end_clock_s"] for r in ours]), stats([r["time_seconds"] for r in theirs])
    ratio = mine["mean"] / peer_t["mean"] if mine["n"] and peer_t["n"] and peer_t["mean"] else None
    return {"ratio_end_clock": ratio, "ours": summarise_ours(ours, target), "peer_time_seconds": peer_t,
            "peer_tta_val_acc": stats([r["tta_val_acc"] for r in theirs]),
            "peer_reached": sum(r["tta_val_acc"] >= target for r in theirs)}


