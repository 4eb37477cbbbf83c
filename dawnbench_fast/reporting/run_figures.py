"""The figures of a run's report (dawnbench_fast.reporting.run_report):
the target's accuracy against the clock, where the time goes (a bar per
phase, the training step's splits beside them) and the training loss per
epoch. Each is drawn from run.json and epochs.jsonl alone, so a finished
folder's report can be rebuilt; none is drawn without matplotlib.
"""

from __future__ import annotations

import functools
import io
import sys
from typing import Any

from dawnbench_fast.reporting import bench

# (run.json, epochs.jsonl lines) of one finished run
Run = tuple[dict, list[dict]]

# The phases of the time-to-accuracy clock (dawnbench_fast.training.train.CLOCK_PHASES),
# named here rather than imported: a report is drawn from the files alone.
CLOCK_PHASES = ("init", "train", "eval")
ON_CLOCK, OFF_CLOCK, SPLIT = "#4c72b0", "#999999", "#8fb3e0"


@functools.cache
def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (files only, no display), or
    None with a note, once per process, where matplotlib is not installed
    (this report's plots and the analyses' figures)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed: no plots (pip install matplotlib)", file=sys.stderr)
        return None
    return plt


def png(plt: Any, fig: Any) -> bytes:
    """``fig`` as PNG bytes; the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def target_metric(run: dict) -> str:
    """The accuracy the run's target is on: "top1", or "top5" (ImageNet's 93%)."""
    return run["result"].get("target_metric") or "top1"


def metric_label(metric: str) -> str:
    return "top-5" if metric == "top5" else "top-1"


def final_accuracy(run: dict) -> float:
    """The final evaluation's accuracy on the target's metric, in [0, 1]."""
    return run["result"][f"final_{target_metric(run)}"]


def accuracy_figure(plt: Any, runs: list[Run]) -> Any:
    """Each run's charged evaluations against the clock, on the metric its
    target is on, its first to reach the target starred; the target as a
    horizontal line, always in view."""
    metric = target_metric(runs[0][0])
    label = metric_label(metric)
    target = 100 * runs[0][0]["config"]["target"]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    accs = [target]
    for run, _ in runs:
        res = run["result"]
        xs = [r["clock_seconds"] for r in res["epochs"]]
        ys = [100 * (r[metric] or 0.0) for r in res["epochs"]]
        accs += ys
        line, = ax.plot(xs, ys, marker="o", ms=4,
                        label=f"seed {res['seed']}: {100 * final_accuracy(run):.2f}% {label}")
        if res["tta_seconds"] is not None:
            hit = next(r for r in res["epochs"] if r["epoch"] == res["tta_epoch"])
            ax.plot([hit["clock_seconds"]], [100 * hit[metric]], marker="*", ms=13, color=line.get_color())
    if any(run["result"]["tta_seconds"] is not None for run, _ in runs):
        ax.plot([], [], ls="", marker="*", ms=10, color="gray", label="time to target")
    ax.axhline(target, color="#c00", ls="--", lw=1, label=f"target {target:.2f}% {label}")
    low, high = min(accs), max(accs)
    pad = max(0.5, 0.08 * (high - low))
    ax.set_ylim(max(0.0, low - pad), min(100.0, high + pad))
    ax.set_xlabel("clock, s (init + training + charged evaluations)")
    ax.set_ylabel(f"test {label}, %")
    single = all(len(run["result"]["epochs"]) == 1 for run, _ in runs)
    ax.set_title("test accuracy against the clock" + (" (--eval-every N adds points)" if single else ""),
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def phase_rows(runs: list[Run]) -> list[tuple[str, float, str]]:
    """(name, mean seconds per run, kind) of each phase, then of each split of
    the training step (``train: forward``...); kind: "clock", "outside" or
    "split". The console's "where the time goes" table, as data."""
    results = [{key: run["result"].get(key) or {} for key in ("phases_seconds", "train_split_seconds")}
               for run, _ in runs]
    seconds = bench.phase_seconds(results)
    return [(name, bench.mean_std(values)[0],
             "split" if name.startswith("  train: ") else "clock" if name in CLOCK_PHASES else "outside")
            for name, values in seconds.items()]


def phase_figure(plt: Any, runs: list[Run]) -> Any | None:
    """A horizontal bar per phase (mean seconds per run): the clock's phases
    in blue, the others (data loading, warm-up, latency, ...) in grey, the
    training step's splits in light blue under them. None without phases."""
    rows = phase_rows(runs)
    if not rows:
        return None
    colours = {"clock": ON_CLOCK, "outside": OFF_CLOCK, "split": SPLIT}
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(rows) + 1.3), dpi=110)
    ys = list(range(len(rows)))[::-1]
    top = max(s for _, s, _ in rows) or 1.0
    for y, (_, s, kind) in zip(ys, rows, strict=True):
        ax.barh(y, s, color=colours[kind])
        ax.annotate(f" {s:.2f} s", (s, y), va="center", fontsize=7)
    ax.set_yticks(ys, [n.strip() for n, _, _ in rows], fontsize=8)
    ax.set_xlim(0, top * 1.18)  # room for the value labels
    for kind, text in (("clock", "on the clock"), ("outside", "outside the clock"),
                       ("split", "a part of the training step")):
        if any(k == kind for _, _, k in rows):
            ax.barh([], [], color=colours[kind], label=text)
    ax.set_xlabel("seconds (mean per run)")
    ax.set_title("where the time goes", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def loss_figure(plt: Any, runs: list[Run]) -> Any | None:
    """Each run's training loss (mean per example over the epoch) against the
    epoch, from its epochs.jsonl; None where no run logged one."""
    curves = [(run["result"]["seed"], [(e["epoch"], e["train_loss"]) for e in log
                                       if e.get("train_loss") is not None]) for run, log in runs]
    curves = [(seed, points) for seed, points in curves if points]
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    for seed, points in curves:
        ax.plot([e for e, _ in points], [v for _, v in points], marker="o", ms=4, label=f"seed {seed}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss (mean per example)")
    ax.set_title("training loss", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig
