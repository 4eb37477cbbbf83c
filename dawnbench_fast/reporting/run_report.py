"""The report a person reads after a run: ``accuracy.png`` (test accuracy
against the time-to-accuracy clock, the target as a horizontal line) and
``report.html`` (one self-contained page: summary figures, that plot inline,
the per-epoch table, the config), beside the DAWNBench files.

Both are made from what the run already wrote (each run folder's run.json and
epochs.jsonl), so they say nothing the files do not, and a report can be
rebuilt from a finished folder. Written atomically, like every result file.
Without matplotlib the plot is left out with a one-line note; the page is
written all the same.
"""

from __future__ import annotations

import base64
import functools
import html
import io
import json
import sys
from pathlib import Path
from typing import Any

from dawnbench_fast import atomic
from dawnbench_fast.reporting import bench
from dawnbench_fast.reporting.run_log import LOG_NAME, read_log

PLOT_NAME = "accuracy.png"
HTML_NAME = "report.html"


@functools.cache
def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (files only, no display), or
    None with a note, once per process, where matplotlib is not installed
    (this report's plot and the analyses' figures)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed: no accuracy plot (pip install matplotlib)",
              file=sys.stderr)
        return None
    return plt


def load_runs(run_dirs: list[Path]) -> list[tuple[dict, list[dict]]]:
    """(run.json, epochs.jsonl lines) of each finished run folder."""
    return [(json.loads((d / "run.json").read_text()), read_log(d / LOG_NAME)) for d in run_dirs]


def plot_png(runs: list[tuple[dict, list[dict]]]) -> bytes | None:
    """The accuracy-against-clock plot as PNG bytes (None without matplotlib)."""
    plt = pyplot()
    if plt is None:
        return None
    fig = accuracy_figure(plt, runs)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def accuracy_figure(plt: Any, runs: list[tuple[dict, list[dict]]]) -> Any:
    """Each run's charged evaluations against the clock, its first to reach
    the target starred; the target as a horizontal line, always in view."""
    target = 100 * runs[0][0]["config"]["target"]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    accs = [target]
    for run, _ in runs:
        res = run["result"]
        xs = [r["clock_seconds"] for r in res["epochs"]]
        ys = [100 * r["top1"] for r in res["epochs"]]
        accs += ys
        line, = ax.plot(xs, ys, marker="o", ms=4, label=f"seed {res['seed']}: {100 * res['final_top1']:.2f}%")
        if res["tta_seconds"] is not None:
            hit = next(r for r in res["epochs"] if r["epoch"] == res["tta_epoch"])
            ax.plot([hit["clock_seconds"]], [100 * hit["top1"]], marker="*", ms=13, color=line.get_color())
    if any(run["result"]["tta_seconds"] is not None for run, _ in runs):
        ax.plot([], [], ls="", marker="*", ms=10, color="gray", label="time to target")
    ax.axhline(target, color="#c00", ls="--", lw=1, label=f"target {target:.2f}%")
    low, high = min(accs), max(accs)
    pad = max(0.5, 0.08 * (high - low))
    ax.set_ylim(max(0.0, low - pad), min(100.0, high + pad))
    ax.set_xlabel("clock, s (init + training + charged evaluations)")
    ax.set_ylabel("test top-1, %")
    single = all(len(run["result"]["epochs"]) == 1 for run, _ in runs)
    ax.set_title("test accuracy against the clock" + (" (--eval-every N adds points)" if single else ""),
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def _cells(values: list[Any], tag: str = "td") -> str:
    return "<tr>" + "".join(f"<{tag}>{html.escape(str(v))}</{tag}>" for v in values) + "</tr>"


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def summary_table(runs: list[tuple[dict, list[dict]]]) -> str:
    """One row per run: the figures of the console report."""
    rows = [_cells(["seed", "top-1 %", "reached target", "time to target s", "epoch", "end clock s",
                    "train cost USD", "latency ms", "inference entry valid"], "th")]
    for run, _ in runs:
        r = run["result"]
        rows.append(_cells([r["seed"], f"{100 * r['final_top1']:.2f}", r["reached_target"],
                            _num(r["tta_seconds"], ".1f"), r["tta_epoch"] or "-",
                            _num(r["end_clock_seconds"], ".1f"), _num(r["train_cost_usd"], ".4f"),
                            _num(r["latency_ms"], ".3f"), r["inference_valid"]]))
    accs = [100 * run["result"]["final_top1"] for run, _ in runs]
    reached = sum(run["result"]["reached_target"] for run, _ in runs)
    m, sd = bench.mean_std(accs)
    return ("<table>" + "\n".join(rows) + "</table>\n"
            f"<p>final top-1: {m:.2f} +- {sd:.2f}% over {len(runs)} run(s); "
            f"reached target: {reached}/{len(runs)}</p>")


def epoch_table(run: dict, log: list[dict]) -> str:
    """The per-epoch table of one run: its epochs.jsonl lines (loss, learning
    rates, accuracy, clock, wall), else (an older run) its charged evaluations."""
    if not log:
        log = [{"epoch": r["epoch"], "top1": r["top1"], "tta": r["tta"],
                "clock_seconds": r["clock_seconds"]} for r in run["result"]["epochs"]]
    groups = list(log[0].get("lr", {}))
    rows = [_cells(["epoch", "train loss", *(f"lr {g}" for g in groups), "top-1 %", "TTA",
                    "clock s", "wall s"], "th")]
    for e in log:
        rows.append(_cells([e["epoch"], _num(e.get("train_loss"), ".4f"),
                            *(_num(e["lr"].get(g), ".4g") for g in groups),
                            "-" if e.get("top1") is None else f"{100 * e['top1']:.2f}",
                            "-" if e.get("tta") is None else ("yes" if e["tta"] else "no"),
                            _num(e.get("clock_seconds"), ".2f"), _num(e.get("wall_seconds"), ".2f")]))
    return "<table>" + "\n".join(rows) + "</table>"


def gpu_html(runs: list[tuple[dict, list[dict]]]) -> str:
    """The GPU (driver, clocks, power limit) and each run's energy, where NVML gave them."""
    gpu = runs[0][0].get("gpu") or {}
    parts = [bench.gpu_line(gpu)] if gpu.get("nvml") else []
    energy = [(run["result"]["seed"], run["result"].get("gpu_energy_joules")) for run, _ in runs]
    if any(j for _, j in energy):
        parts.append("GPU energy per run: " + ", ".join(
            f"seed {seed}: {j['run'] / 1e3:.2f} kJ ({j['clock'] / 1e3:.2f} kJ on the clock)"
            for seed, j in energy if j))
    return "".join(f"<p>{html.escape(line)}</p>" for line in parts)


STYLE = """body { font-family: sans-serif; margin: 1.5em; max-width: 70em; }
table { border-collapse: collapse; font-size: 13px; margin-bottom: 1em; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
pre { background: #f6f6f6; padding: 0.6em; font-size: 12px; overflow-x: auto; }
img { max-width: 100%; }"""


def render_html(runs: list[tuple[dict, list[dict]]], png: bytes | None, title: str) -> str:
    """The one-page report: no scripts, no external files (the plot is inline)."""
    first = runs[0][0]
    e = html.escape
    target = 100 * first["config"]["target"]
    plot = (f'<img alt="test accuracy against the clock" src="data:image/png;base64,'
            f'{base64.b64encode(png).decode()}">' if png else "<p>(no plot: matplotlib is not installed)</p>")
    epochs = "\n".join(f"<h3>seed {run['result']['seed']}</h3>\n{epoch_table(run, log)}" for run, log in runs)
    git = first.get("git") or {}
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{e(title)}</title>
<style>
{STYLE}
</style></head><body>
<h1>{e(title)}</h1>
<p>{e(str(first["hardware"]))}, device {e(str(first["device"]))}, kernels {e(str(first["kernels_backend"]))},
precision {e(str(first["config"].get("precision")))}, target {target:.2f}% top-1<br>
git {e(str(git.get("sha")))}{" (uncommitted changes)" if git.get("dirty") else ""},
torch {e(str(first["versions"].get("torch")))}<br>
command: <code>{e(" ".join(first["command"]))}</code></p>
{gpu_html(runs)}
<h2>Summary</h2>
{summary_table(runs)}
<p>Time to target is DAWNBench's time to accuracy: the clock (init + training + every charged
evaluation) at the first evaluation that reached the target. The starred point marks it.</p>
{plot}
<h2>Per epoch</h2>
{epochs}
<h2>Config</h2>
<p>{"Seed " + str(first["result"]["seed"]) + "'s; the other runs differ only in their seed. "
    if len(runs) > 1 else ""}<code>--config run.json</code> (the run folder's) reruns it.</p>
<pre>{e(json.dumps(first["config"], indent=2), quote=False)}</pre>
</body></html>
"""


def write_report(folder: Path, run_dirs: list[Path], title: str) -> list[Path]:
    """``accuracy.png`` (where matplotlib is installed) and ``report.html`` in
    ``folder``, from the finished runs in ``run_dirs``; returns the paths written."""
    runs = load_runs(run_dirs)
    png = plot_png(runs)
    written = []
    if png is not None:
        with atomic.atomic_path(folder / PLOT_NAME) as tmp:
            tmp.write_bytes(png)
        written.append(folder / PLOT_NAME)
    atomic.write_text(folder / HTML_NAME, render_html(runs, png, title))
    return [*written, folder / HTML_NAME]
