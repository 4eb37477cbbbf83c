"""The report a person reads after a run: ``accuracy.png`` (test accuracy,
on the metric the target is on, against the time-to-accuracy clock, the
target as a horizontal line) and ``report.html`` (one self-contained page:
summary figures with the time to target with and without the warm-up, that
plot inline, where the time goes as a table and a bar chart, the training
loss, the per-epoch table, the config), beside the DAWNBench files and
``report.txt`` (the console summary, written by dawnbench_fast.runner.runs).

Both are made from what the run already wrote (each run folder's run.json and
epochs.jsonl), so they say nothing the files do not, and a report can be
rebuilt from a finished folder. Written atomically, like every result file.
Without matplotlib the plot is left out with a one-line note; the page is
written all the same.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from dawnbench_fast import atomic
from dawnbench_fast.reporting import bench, run_figures
from dawnbench_fast.reporting.run_figures import Run, metric_label, target_metric
from dawnbench_fast.reporting.run_log import LOG_NAME, read_log

PLOT_NAME = "accuracy.png"
HTML_NAME = "report.html"
TEXT_NAME = "report.txt"  # the console summary, as printed


def load_runs(run_dirs: list[Path]) -> list[Run]:
    """(run.json, epochs.jsonl lines) of each finished run folder."""
    return [(json.loads((d / "run.json").read_text()), read_log(d / LOG_NAME)) for d in run_dirs]


def figures_png(runs: list[Run]) -> dict[str, bytes]:
    """The report's figures as PNG bytes by name ("accuracy", "phases",
    "loss"; a figure with nothing to draw is left out); empty without matplotlib."""
    plt = run_figures.pyplot()
    if plt is None:
        return {}
    drawn = {"accuracy": run_figures.accuracy_figure(plt, runs),
             "phases": run_figures.phase_figure(plt, runs), "loss": run_figures.loss_figure(plt, runs)}
    return {name: run_figures.png(plt, fig) for name, fig in drawn.items() if fig is not None}


def _cells(values: list[Any], tag: str = "td") -> str:
    return "<tr>" + "".join(f"<{tag}>{html.escape(str(v))}</{tag}>" for v in values) + "</tr>"


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def summary_table(runs: list[Run]) -> str:
    """One row per run: the figures of the console report, the accuracy on
    the target's metric, the time to target without and with the warm-up."""
    metric = target_metric(runs[0][0])
    extra = [] if metric == "top1" else [f"{metric_label(metric)} %"]
    rows = [_cells(["seed", "top-1 %", *extra, "reached target", "time to target s",
                    "with the warm-up s", "epoch", "end clock s", "train cost USD", "latency ms",
                    "inference entry valid"], "th")]
    for run, _ in runs:
        r = run["result"]
        rows.append(_cells([r["seed"], f"{100 * r['final_top1']:.2f}",
                            *([f"{100 * run_figures.final_accuracy(run):.2f}"] if extra else []),
                            r["reached_target"], _num(r["tta_seconds"], ".1f"),
                            _num(bench.with_warmup(r), ".1f"), r["tta_epoch"] or "-",
                            _num(r["end_clock_seconds"], ".1f"), _num(r["train_cost_usd"], ".4f"),
                            _num(r["latency_ms"], ".3f"), r["inference_valid"]]))
    accs = [100 * run_figures.final_accuracy(run) for run, _ in runs]
    reached = sum(run["result"]["reached_target"] for run, _ in runs)
    m, sd = bench.mean_std(accs)
    notes = [f"seed {run['result']['seed']}: {bench.latency_accuracy_note(run['result'])}"
             for run, _ in runs if run["result"].get("latency_top1") is not None]
    return ("<table>" + "\n".join(rows) + "</table>\n"
            f"<p>final {metric_label(metric)}: {m:.2f} +- {sd:.2f}% over {len(runs)} run(s); "
            f"reached target: {reached}/{len(runs)}</p>\n"
            + "".join(f"<p>{html.escape(n)}</p>" for n in notes))


def phase_table(runs: list[Run]) -> str:
    """The console's "where the time goes": mean seconds per run of each
    phase and of each split of the training step."""
    where = {"clock": "on the clock", "outside": "outside the clock", "split": "part of train"}
    rows = [_cells(["phase", "seconds", ""], "th")]
    rows += [_cells([name.strip(), f"{s:.2f}", where[kind]])
             for name, s, kind in run_figures.phase_rows(runs)]
    return "<table>" + "\n".join(rows) + "</table>"


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


def gpu_html(runs: list[Run]) -> str:
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


def _img(figures: dict[str, bytes], name: str, alt: str) -> str:
    """One figure inline (the page stands alone), or a line saying why it is absent."""
    if name in figures:
        return f'<img alt="{alt}" src="data:image/png;base64,{base64.b64encode(figures[name]).decode()}">'
    if not figures:
        return "<p>(no plot: matplotlib is not installed)</p>"
    return f"<p>(no {alt}: the run logged nothing to draw it from)</p>"


def render_html(runs: list[Run], figures: dict[str, bytes], title: str) -> str:
    """The one-page report: no scripts, no external files (the plots are inline)."""
    first = runs[0][0]
    e = html.escape
    target = 100 * first["config"]["target"]
    epochs = "\n".join(f"<h3>seed {run['result']['seed']}</h3>\n{epoch_table(run, log)}" for run, log in runs)
    git = first.get("git") or {}
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{e(title)}</title>
<style>
{STYLE}
</style></head><body>
<h1>{e(title)}</h1>
<p>{e(str(first["hardware"]))}, device {e(str(first["device"]))}, kernels {e(str(first["kernels_backend"]))},
precision {e(str(first["config"].get("precision")))},
target {target:.2f}% {metric_label(target_metric(first))}<br>
git {e(str(git.get("sha")))}{" (uncommitted changes)" if git.get("dirty") else ""},
torch {e(str(first["versions"].get("torch")))}<br>
command: <code>{e(" ".join(first["command"]))}</code></p>
{gpu_html(runs)}
<h2>Summary</h2>
{summary_table(runs)}
<p>Time to target is DAWNBench's time to accuracy: the clock (init + training + every charged
evaluation) at the first evaluation that reached the target. The starred point marks it. The
warm-up (compilation, kernel choice) is outside the clock, as in the published GPU records;
"with the warm-up" charges it too.</p>
{_img(figures, "accuracy", "test accuracy against the clock")}
<h2>Where the time goes</h2>
{_img(figures, "phases", "phase-time chart")}
{phase_table(runs)}
<h2>Training loss</h2>
{_img(figures, "loss", "training-loss curve")}
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
    figures = figures_png(runs)
    written = []
    if "accuracy" in figures:
        with atomic.atomic_path(folder / PLOT_NAME) as tmp:
            tmp.write_bytes(figures["accuracy"])
        written.append(folder / PLOT_NAME)
    atomic.write_text(folder / HTML_NAME, render_html(runs, figures, title))
    return [*written, folder / HTML_NAME]
