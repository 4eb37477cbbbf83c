"""DAWNBench metrics and reports: training and inference cost, the per-epoch
TSV, the submission JSONs, run.json (everything that makes a run reproducible;
its keys are documented in docs/RUN_JSON.md) and the console report.

The measurements themselves (the time-to-accuracy clock, one-image latency)
are taken by dawnbench_fast.training.train; this module only turns them into files
and text, for any recipe.

All files are written atomically (dawnbench_fast.atomic: a temporary name in
the same folder, then a rename), so a killed run never leaves a half-written report.
"""

from __future__ import annotations

import dataclasses
import platform
import re
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import torch

from dawnbench_fast.atomic import write_json, write_text
from dawnbench_fast.execution import runtime
from dawnbench_fast.hardware import gpu_info
from dawnbench_fast.hardware.machine import cpu_info, cpu_model
from dawnbench_fast.reporting import provenance
from dawnbench_fast.training.train import EpochRow, LoopResult

# Bumped when a run.json key changes meaning or goes away (docs/RUN_JSON.md).
RUN_JSON_SCHEMA_VERSION = 2


# ---------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------


def git_revision() -> dict[str, object]:
    """The commit of the code that runs and whether the checkout differs from
    it: proved from a source stamp where DAWNBENCH_SOURCE_STAMP names one (a
    copied checkout whose .git may be stale: dawnbench_fast.reporting.provenance),
    else as the local git reads it."""
    if (stamped := provenance.stamp_revision()) is not None:
        return stamped
    here = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here, capture_output=True, text=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"sha": None, "dirty": None, "source": "git"}
    return {"sha": sha or None, "dirty": bool(dirty) if sha else None, "source": "git"}


def hardware_description(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()}, {torch.get_num_threads()} threads"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")


def environment(device: torch.device, entry: str) -> dict[str, object]:
    """Where and with what a run ran; ``entry`` is the module run with -m."""
    from dawnbench_fast import __version__
    versions = {"dawnbench_fast": __version__, "python": platform.python_version(),
                "torch": torch.__version__}
    for mod in ("triton", "numba", "numpy"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            versions[mod] = None
    return {
        "git": git_revision(),
        "versions": versions,
        "device": str(device),
        "hardware": hardware_description(device),
        "cpu": cpu_model(),
        "cpu_info": cpu_info(),
        "threads": torch.get_num_threads(),
        "gpu": gpu_info.gpu_record(device),
        "malloc": runtime.malloc_mode(),
        "command": [sys.executable, "-m", entry, *sys.argv[1:]],
        "platform": platform.platform(),
    }


# ---------------------------------------------------------------------------
# DAWNBench files
# ---------------------------------------------------------------------------


def tsv_text(rows: list[EpochRow], top5: bool = False) -> str:
    """epoch<TAB>hours<TAB>top1Accuracy[<TAB>top5Accuracy], accuracies in %."""
    head = "epoch\thours\ttop1Accuracy" + ("\ttop5Accuracy" if top5 else "")
    lines = [head]
    for r in rows:
        line = f"{r.epoch}\t{r.hours:.6f}\t{100 * r.top1:.2f}"
        if top5:
            line += f"\t{100 * (r.top5 or 0.0):.2f}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def submission_names(author: str, model: str, hardware_tag: str, framework: str) -> str:
    """DAWNBench file stem: [author]_[model]_[hardware tag]_[framework]."""
    return "_".join(slug(p) for p in (author, model, hardware_tag, framework))


def train_json(*, author: str, email: str, model: str, hardware: str, cost_per_hour: float | None,
               log_filename: str, misc: dict, code_url: str | None = None) -> dict:
    """DAWNBench's training JSON; ``code_url`` None leaves codeURL empty: a
    made-up URL would pass for a real one (the summary says it is missing)."""
    return {
        "version": "v1.0",
        "author": author,
        "authorEmail": email,
        "framework": f"PyTorch {torch.__version__}",
        "codeURL": code_url or "",
        "model": model,
        "hardware": hardware,
        "costPerHour": cost_per_hour,
        "timestamp": date.today().isoformat(),
        "logFilename": log_filename,
        "misc": misc,
    }


def inference_json(base: dict, latency_ms: float, top1: float, cost_per_hour: float | None,
                   top5: float | None = None) -> dict:
    """DAWNBench's inference JSON; ``top5Accuracy`` where the recipe measures it (ImageNet)."""
    out = dict(base)
    out.pop("logFilename", None)
    out["latency"] = latency_ms
    out["cost"] = inference_cost(latency_ms, cost_per_hour)
    out["top1Accuracy"] = round(100 * top1, 2)
    if top5 is not None:
        out["top5Accuracy"] = round(100 * top5, 2)
    return out


def write_submission(run_dir: Path, stem: str, base: dict, rows: list[EpochRow], *,
                     latency_ms: float | None, inference_top1: float, cost_per_hour: float | None,
                     inference_misc: dict, inference_top5: float | None = None) -> float | None:
    """Write one run's DAWNBench files: the TSV, the training JSON ``base``
    and, when a latency was measured, the inference JSON (its misc: base's
    plus ``inference_misc`` and the cost per 10,000 images). Returns the
    inference cost per image (None without a latency or a price)."""
    write_text(run_dir / f"{stem}.tsv", tsv_text(rows, top5=any(r.top5 is not None for r in rows)))
    write_json(run_dir / f"{stem}.json", base)
    if latency_ms is None:
        return None
    inf = inference_json(base, latency_ms, inference_top1, cost_per_hour, inference_top5)
    inf["misc"] = {**base["misc"], **inference_misc,
                   "cost_per_10000_images": None if inf["cost"] is None else inf["cost"] * 1e4}
    write_json(run_dir / f"{stem}_inference.json", inf)
    return inf["cost"]


# ---------------------------------------------------------------------------
# Cost
# ---------------------------------------------------------------------------


def train_cost(seconds: float | None, cost_per_hour: float | None) -> float | None:
    """USD for ``seconds`` of training at ``cost_per_hour`` (None if either is unknown)."""
    return None if (seconds is None or cost_per_hour is None) else seconds / 3600 * cost_per_hour


def inference_cost(latency_ms: float, cost_per_hour: float | None) -> float | None:
    """USD per image classified in ``latency_ms`` (None without a price)."""
    return None if cost_per_hour is None else cost_per_hour * latency_ms / 3.6e6


# ---------------------------------------------------------------------------
# run.json
# ---------------------------------------------------------------------------


def run_summary(*, seed: int, result: LoopResult, cost_per_hour: float | None, inference: Any,
                inference_cost_per_image: float | None, phases: dict[str, float],
                splits: dict[str, float], extra: dict | None = None) -> dict:
    """run.json's ``result``: one run's outcome (docs/RUN_JSON.md). ``inference``
    is the run's DAWNBench inference entry (dawnbench_fast.runner.runs.Inference);
    ``extra`` holds a recipe's own keys (the CIFAR recipe: conv_wgrad_methods)."""
    target_s = result.time_to_target_seconds
    return {
        "seed": seed,
        "final_top1": result.final.top1,
        "final_top5": result.final.top5,
        "reached_target": target_s is not None,
        "tta_seconds": target_s,
        "tta_with_warmup_seconds": None if target_s is None else target_s + phases.get("warmup", 0.0),
        "tta_epoch": result.time_to_target_epoch,
        "end_clock_seconds": result.final.clock_seconds,
        "train_cost_usd": train_cost(target_s, cost_per_hour),
        "latency_ms": inference.latency_ms,
        "latency_images": inference.images,
        "inference_top1": inference.top1,
        "inference_tta": inference.tta,
        "inference_valid": inference.valid,
        "inference_one_view": inference.one_view,
        **inference.loop_record(),
        "inference_cost_usd_per_image": inference_cost_per_image,
        "phases_seconds": dict(phases),
        "train_split_seconds": dict(splits),
        **(extra or {}),
        "epochs": [dataclasses.asdict(r) | {"hours": r.hours} for r in result.rows],
    }


def run_json(*, env: dict, config: dict, backend: str, ops: dict, data: dict, result: dict) -> dict:
    """The whole run.json: schema version, ``environment()``, the resolved
    config, the kernels that served each op, the data's origin, the result."""
    return {"schema_version": RUN_JSON_SCHEMA_VERSION, **env, "config": config,
            "kernels_backend": backend, "ops": ops, "data": data, "result": result}


# ---------------------------------------------------------------------------
# Summaries
# ---------------------------------------------------------------------------


def mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain aligned text table."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*headers), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r) for r in rows]
    return "\n".join(lines)


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "not reached"
    return f"{s:.1f} s" if s < 120 else f"{s:.1f} s ({s / 60:.2f} min)"


def fmt_cost(usd: float | None) -> str:
    return "n/a (pass --cost-per-hour)" if usd is None else f"${usd:.4f}"


# ---------------------------------------------------------------------------
# Console report
# ---------------------------------------------------------------------------


def with_warmup(s: dict) -> float | None:
    """Time to the target with the warm-up charged (run.json's
    ``tta_with_warmup_seconds``; older run.json files: from their phases)."""
    if s["tta_seconds"] is None:
        return None
    warmup = (s.get("phases_seconds") or {}).get("warmup", 0.0)
    return s.get("tta_with_warmup_seconds") or s["tta_seconds"] + warmup


def run_line(s: dict, target: float) -> str:
    """One finished run, one line: ``seed 0: final top-1 94.10%, time to 94.00%: ...``
    (and the top-5 where the target is top-5: ImageNet)."""
    top5 = f", top-5 {100 * s['final_top5']:.2f}%" if s.get("target_metric") == "top5" else ""
    warm = "" if s["tta_seconds"] is None else f" ({with_warmup(s):.1f} s with the warm-up charged)"
    return (f"seed {s['seed']}: final top-1 {100 * s['final_top1']:.2f}%{top5}, time to "
            f"{100 * target:.2f}%{' top-5' if top5 else ''}: {fmt_seconds(s['tta_seconds'])}{warm}")


def report_text(runs: list[dict], cfg: Any, cost_per_hour: float | None, hardware: str,
                backend: str, dataset: str = "CIFAR-10", gpu: dict | None = None) -> str:
    """The summary printed after the runs (``runs``: run.json ``result``s;
    ``cfg``: the recipe's config, read for ``precision``, ``target`` and the
    recipe's choice (``extra["recipe_choice"]``);
    ``gpu``: run.json's ``gpu``, for its driver, clocks and power limit)."""
    rows = []
    for s in runs:
        lat = "-" if s["latency_ms"] is None else f"{s['latency_ms']:.3f}"
        rows.append([str(s["seed"]), f"{100 * s['final_top1']:.2f}",
                     "-" if s["tta_seconds"] is None else f"{s['tta_seconds']:.1f}",
                     "-" if s["tta_seconds"] is None else f"{with_warmup(s):.1f}",
                     str(s["tta_epoch"] or "-"), fmt_cost(s["train_cost_usd"]), lat])
    metric = "top-5" if runs and runs[0].get("target_metric") == "top5" else "top-1"
    lines = [f"\nDAWNBench {dataset} report: {hardware}, kernels={backend}, "
             f"precision={cfg.precision}, target {100 * cfg.target:.2f}% {metric}",
             table(["seed", "top-1 %", "TTA s", "TTA + warm-up s", "epoch", "train cost", "latency ms"],
                   rows)]
    if gpu and gpu.get("nvml"):
        lines.insert(1, gpu_line(gpu))
    if runs and runs[0].get("step"):
        lines.insert(1, step_line(runs[0]["step"]))
    choice = getattr(cfg, "extra", {}).get("recipe_choice")
    if choice:  # the recipe as the trainer chose it (cifar.recipe_choice)
        lines.insert(1, f"recipe: {choice['recipe']} ({choice['why']})")
    lines += _outcome_lines(runs, cost_per_hour)
    lines.append("\nwhere the time goes (mean seconds per run; the clock = init + train + eval):")
    lines.append(table(["phase", "seconds"],
                       [[k, f"{mean_std(v)[0]:.2f}"] for k, v in phase_seconds(runs).items()]))
    return "\n".join(lines)


def step_line(step: dict) -> str:
    """How the training step ran (run.json's ``step``): captured, or eager and why."""
    if step["captured"]:
        return (f"step: replayed as {len(step.get('graphs') or step['variants'])} CUDA graph(s) "
                f"({', '.join(step['variants'])}), captured in the warm-up in "
                f"{step.get('capture_seconds', 0.0):.2f} s")
    if step.get("capture_failed"):
        return f"step: eager, capture failed: {step['capture_failed']}"
    return "step: eager (not captured: " + "; ".join(step["eager_why"]) + ")"


def _outcome_lines(runs: list[dict], cost_per_hour: float | None) -> list[str]:
    """Accuracy mean +- std, time and cost to the target, latency and its cost."""
    accs = [100 * s["final_top1"] for s in runs]
    reached = [s["tta_seconds"] for s in runs if s["tta_seconds"] is not None]
    m, sd = mean_std(accs)
    lines = [f"\nfinal top-1: {m:.2f} +- {sd:.2f}% over {len(runs)} run(s); "
             f"reached target: {len(reached)}/{len(runs)}"]
    if runs and runs[0].get("target_metric") == "top5":
        m5, sd5 = mean_std([100 * s["final_top5"] for s in runs])
        lines.append(f"final top-5: {m5:.2f} +- {sd5:.2f}%")
    if reached:
        tm, tsd = mean_std(reached)
        wm, wsd = mean_std([with_warmup(s) for s in runs if s["tta_seconds"] is not None])
        lines.append(f"time to target (runs that reached it): {tm:.1f} +- {tsd:.1f} s; with the warm-up "
                     f"charged: {wm:.1f} +- {wsd:.1f} s (the warm-up is outside the clock, as in the "
                     "published GPU records)")
        if cost_per_hour is not None:
            lines.append(f"training cost: ${train_cost(tm, cost_per_hour):.4f} per run")
    energy = [s["gpu_energy_joules"] for s in runs if s.get("gpu_energy_joules")]
    if energy:
        run_kj = mean_std([e["run"] / 1e3 for e in energy])[0]
        clock_kj = mean_std([e["clock"] / 1e3 for e in energy])[0]
        lines.append(f"GPU energy: {run_kj:.2f} kJ per run ({run_kj / 3600:.4f} kWh; {clock_kj:.2f} kJ "
                     "on the clock)")
    lines += latency_lines(runs, cost_per_hour)
    if any(s["latency_ms"] is not None for s in runs):
        notes = [(s["seed"], latency_accuracy_note(s)) for s in runs if s.get("latency_top1") is not None]
        lines += [("" if len(runs) == 1 else f"seed {seed}: ") + note for seed, note in notes]
    return lines


def latency_lines(runs: list[dict], cost_per_hour: float | None) -> list[str]:
    """The one-image latency labelled with what it is: one run's latency at
    that run's accuracy; over several seeds, the mean of their latencies
    (each timed on its own seed's model), then each seed's latency at its
    model's accuracy, never the mean beside one seed's accuracy."""
    timed = [s for s in runs if s["latency_ms"] is not None]
    if not timed:
        return []
    lm, _ = mean_std([s["latency_ms"] for s in timed])
    per_image = inference_cost(lm, cost_per_hour)
    cost = "" if per_image is None else (
        f"; inference cost ${per_image:.3e}/image, ${per_image * 1e4:.4f} per 10,000")
    if len(timed) == 1:
        whose = "" if len(runs) == 1 else f" (seed {timed[0]['seed']}'s model, the only one timed)"
        return [f"one-image latency: {lm:.3f} ms{whose}, {_procedure(timed[0])}" + cost]
    lines = [f"one-image latency: {lm:.3f} ms, the mean of {len(timed)} seeds' latencies, each "
             f"timed on its own seed's model" + cost]
    lines += [f"  seed {s['seed']}: {s['latency_ms']:.3f} ms, {_procedure(s)}" for s in timed]
    return lines


def latency_accuracy_note(s: dict) -> str:
    """The accuracy of the latency loop's own predictions, in words: over the
    whole test set, whether it equals the batched evaluation's (it should);
    over fewer images, labelled as over those images. ``s``: run.json's result."""
    def accs(top1: float, top5: float | None) -> str:
        return f"top-1 {100 * top1:.2f}%" + ("" if top5 is None else f", top-5 {100 * top5:.2f}%")

    n, total = s["latency_images"], s["latency_test_images"]
    loop = f"the latency loop's own predictions: {accs(s['latency_top1'], s.get('latency_top5'))}"
    if s["latency_matches_batched"] is None:
        return (f"{loop} over its {n} images only (of {total} test images; --latency-images {total} "
                "scores them all)")
    if s["latency_matches_batched"]:
        return f"{loop} over all {n} test images, equal to the batched evaluation's"
    batched = accs(s["inference_top1"], s.get("inference_top5", s.get("final_top5")))
    return (f"{loop} over all {n} test images, NOT equal to the batched evaluation's {batched} "
            "(same model and views, one image at a time: the batch size changed the arithmetic)")


def gpu_line(gpu: dict) -> str:
    """run.json's ``gpu`` in one line: driver, maximum clocks, power limit."""
    def mhz(v: object) -> str:
        return "?" if v is None else f"{v} MHz"

    watts = "?" if gpu.get("power_limit_w") is None else f"{gpu['power_limit_w']:.0f} W"
    top = gpu.get("max_clocks_mhz") or {}
    return (f"GPU: {gpu['name']}, driver {gpu.get('driver_version') or '?'}, max clocks SM "
            f"{mhz(top.get('sm'))} / memory {mhz(top.get('memory'))}, power limit {watts}")


def _procedure(s: dict) -> str:
    """The accuracy a latency belongs to, and whether the entry is valid."""
    views = "with TTA" if s["inference_tta"] else "one view"
    valid = "" if s["inference_valid"] else ", below the target: not a valid entry"
    line = f"at top-1 {100 * s['inference_top1']:.2f}% ({views}{valid})"
    if s.get("inference_one_view"):
        o = s["inference_one_view"]
        line += f"; one view: {o['latency_ms']:.3f} ms at {o['top1Accuracy']:.2f}%"
    return line


def phase_seconds(runs: list[dict]) -> dict[str, list[float]]:
    """Phase -> its seconds in each run; the step's splits indented under train."""
    ph: dict[str, list[float]] = {}
    for s in runs:
        for k, v in s["phases_seconds"].items():
            ph.setdefault(k, []).append(v)
    for s in runs:
        for k, v in s["train_split_seconds"].items():
            ph.setdefault(f"  train: {k}", []).append(v)
    return ph
