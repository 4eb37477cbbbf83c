"""``stability``: how much one seed's result says. N seeds of one recipe,
trained (``--runs N``) or read (``--from``): the time to accuracy's mean, std
and coefficient of variation over the runs that reached the target, the
final accuracy's mean, std and t-distribution confidence interval, and the
fraction of runs that reached the target (DAWNBench times one run; a claim of
94% needs the mean over several, docs/FACTS.md, "CIFAR-10 to 94%: the records").
"""

from __future__ import annotations

import argparse
from typing import Any

from dawnbench_fast.analyze import study_cli
from dawnbench_fast.analyze.report_files import fmt_mean_std, fmt_pct, fmt_time, write_outputs
from dawnbench_fast.analyze.run_records import RunRecord
from dawnbench_fast.analyze.stats import describe, reached_fraction
from dawnbench_fast.analyze.training_runs import Arm
from dawnbench_fast.reporting.bench import table

COMMAND = "stability"
DEFAULT_RUNS = 5


def add_parser(sub: Any) -> None:
    p = sub.add_parser(COMMAND, help="N seeds of a recipe: time to accuracy and accuracy, mean, std, "
                       "CV, confidence interval, fraction reaching the target",
                       description=__doc__)
    study_cli.add_common_args(p)
    study_cli.add_study_args(p, runs=DEFAULT_RUNS, target=study_cli.DAWNBENCH_TARGET)
    p.set_defaults(command_fn=run)


def run(args: argparse.Namespace) -> int:
    study_cli.check_study_args(args)
    out = study_cli.resolve_out(args, COMMAND)
    arm = Arm(args.recipe or "default", f"the {args.recipe or 'default'} recipe")
    target = study_cli.study_target(args)
    records, failures = study_cli.collect_runs(args, out, [arm], target)
    if args.sources is not None:
        target = study_cli.target_of_runs(args, {r.target for r in records})
    data = summarize(records, target)
    data["failed"] = study_cli.failures_json(failures)
    text = "\n".join([render(data), *study_cli.failure_lines(failures)])
    write_outputs(out, COMMAND, data, text, lambda plt: figure(plt, data))
    return 0


def summarize(records: list[RunRecord], target: float) -> dict:
    """The figures of ``records`` against ``target`` (stability.json)."""
    runs = [{"run": r.folder, "seed": r.seed, "final_top1": r.final_top1,
             "time_to_target_s": r.time_to(target), "epoch_to_target": r.epoch_to(target),
             "end_clock_s": r.end_clock, "path": str(r.path)} for r in records]
    times = [x["time_to_target_s"] for x in runs]
    return {
        "command": COMMAND, "target": target, "target_note": study_cli.target_note(target),
        "runs": runs, "reached": reached_fraction(times),
        # over the runs that reached the target: a run that never did has no time
        "time_to_target_s": describe([t for t in times if t is not None]),
        "final_top1": describe([r.final_top1 for r in records]),
        "end_clock_s": describe([r.end_clock for r in records]),
    }


def _ci(d: dict, scale: float, unit: str, digits: int) -> str:
    if d["ci"] is None:
        return "n/a (one value)" if d["n"] == 1 else "n/a"
    lo, hi = (scale * v for v in d["ci"])
    return f"[{lo:.{digits}f}, {hi:.{digits}f}]{unit} ({100 * d['confidence']:.0f}%, t with {d['n'] - 1} df)"


def render(data: dict) -> str:
    rows = [[r["run"], str(r["seed"]), fmt_pct(r["final_top1"]), fmt_time(r["time_to_target_s"]),
             "-" if r["epoch_to_target"] is None else str(r["epoch_to_target"]), f"{r['end_clock_s']:.1f} s"]
            for r in data["runs"]]
    t, acc, reached = data["time_to_target_s"], data["final_top1"], data["reached"]
    cv = "n/a" if t["cv"] is None else f"{100 * t['cv']:.1f}%"
    return "\n".join([
        f"stability: {len(rows)} run(s); {data['target_note']}",
        table(["run", "seed", "final top-1", "time to target", "epoch", "end clock"], rows),
        f"reached the target: {reached['reached']}/{reached['runs']} ({fmt_pct(reached['fraction'], 0)})",
        f"time to target (over the {t['n']} that reached it): {fmt_mean_std(t, unit=' s')}, "
        f"CV {cv}, CI {_ci(t, 1.0, ' s', 1)}",
        f"final top-1: {fmt_mean_std(acc, 100, '%', 2)}, CI {_ci(acc, 100, '%', 2)}",
    ])


def figure(plt: Any, data: dict) -> Any:
    """Left: each run's time to target (x at its end clock where it never
    reached it). Right: each run's final accuracy, the mean, its confidence
    interval and the target."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    runs = data["runs"]
    xs = list(range(len(runs)))
    labels = [f"s{r['seed']}" for r in runs]
    for x, r in zip(xs, runs, strict=True):
        if r["time_to_target_s"] is not None:
            left.bar(x, r["time_to_target_s"], color="#4c72b0")
        else:
            left.plot([x], [r["end_clock_s"]], "x", color="#c00", ms=9)
            left.annotate("not reached", (x, r["end_clock_s"]), ha="center", va="bottom", fontsize=7)
    if data["time_to_target_s"]["n"]:
        left.axhline(data["time_to_target_s"]["mean"], color="k", ls="--", lw=1, label="mean (reached)")
        left.legend(fontsize=8)
    left.set(xticks=xs, xticklabels=labels, ylabel="time to target, s (x: end clock, not reached)",
             title=f"time to {100 * data['target']:.2f}%")
    accs = [100 * r["final_top1"] for r in runs]
    right.plot(xs, accs, "o", color="#4c72b0")
    acc = data["final_top1"]
    right.axhline(100 * acc["mean"], color="k", lw=1, label="mean")
    if acc["ci"] is not None:
        right.axhspan(100 * acc["ci"][0], 100 * acc["ci"][1], color="k", alpha=0.1,
                      label=f"{100 * acc['confidence']:.0f}% CI of the mean")
    right.axhline(100 * data["target"], color="#c00", ls="--", lw=1, label="target")
    right.set(xticks=xs, xticklabels=labels, ylabel="final test top-1, %", title="final accuracy")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig
