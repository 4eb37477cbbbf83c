"""``thresholds``: the time to each accuracy on the way to the target (90, 91,
92, 93 and 94% by default), from runs whose every epoch ends with a charged
evaluation (``--eval-every 1``), trained or read with ``--from``.

The DAWNBench paper's point, made visible: the last fraction of a percent
costs the most, and a run that ends just below a threshold never reaches it
at all, so its time is not "a little longer" but missing. Such runs are
reported as "not reached", with how far short they stayed, and left out of
that threshold's mean (the reached fraction says how many).
"""

from __future__ import annotations

import argparse
from typing import Any

from dawnbench_fast.analyze import study_cli
from dawnbench_fast.analyze.report_files import fmt_mean_std, fmt_pct, fmt_time, gap, write_outputs
from dawnbench_fast.analyze.run_records import RunRecord
from dawnbench_fast.analyze.stats import describe, reached_fraction
from dawnbench_fast.analyze.training_runs import Arm
from dawnbench_fast.reporting.bench import table

COMMAND = "thresholds"
DEFAULT_RUNS = 5
DEFAULT_THRESHOLDS = (0.90, 0.91, 0.92, 0.93, 0.94)
QUICK_THRESHOLDS = (0.25, 0.30, 0.35)  # what --quick's two epochs on a subset reach


def add_parser(sub: Any) -> None:
    p = sub.add_parser(COMMAND, help="time to each of several accuracies (90..94%%) from runs "
                       "evaluated every epoch, one line per run", description=__doc__)
    study_cli.add_common_args(p)
    study_cli.add_study_args(p, runs=DEFAULT_RUNS, target=max(DEFAULT_THRESHOLDS))
    p.add_argument("--thresholds", default=None, metavar="T,T,...",
                   help="accuracies, fractions, comma-separated (default "
                   f"{','.join(map(str, DEFAULT_THRESHOLDS))}; {','.join(map(str, QUICK_THRESHOLDS))} with "
                   "--quick); runs trained here get the highest as their --target")
    p.set_defaults(command_fn=run)


def parse_thresholds(text: str) -> tuple[float, ...]:
    """``0.9,0.94`` -> (0.9, 0.94), sorted; a one-line error for anything else."""
    # written so that nan fails the range check
    return study_cli.comma_list("--thresholds", text, float, "0.9,0.92,0.94", lambda v: 0.0 < v <= 1.0,
                                "each must be a fraction in (0, 1]: 0.94 means 94%")


def run(args: argparse.Namespace) -> int:
    study_cli.check_study_args(args)
    if args.thresholds is not None:
        levels = parse_thresholds(args.thresholds)
    else:
        levels = QUICK_THRESHOLDS if args.quick else DEFAULT_THRESHOLDS
    out = study_cli.resolve_out(args, COMMAND)
    arm = Arm(args.recipe or "default", "evaluated (and charged) every epoch")
    target = args.target if args.target is not None else max(levels)
    records, failures = study_cli.collect_runs(args, out, [arm], target, extra=["--eval-every", "1"])
    data = summarize(records, levels)
    data["failed"] = study_cli.failures_json(failures)
    text = "\n".join([render(data), *study_cli.failure_lines(failures)])
    write_outputs(out, COMMAND, data, text, lambda plt: figure(plt, data))
    return 0


def summarize(records: list[RunRecord], levels: tuple[float, ...]) -> dict:
    """Per threshold: each run's time and epoch to it (None: not reached, with
    how far below it the run's best evaluation stayed), the mean over the
    runs that reached it, and the mean of each run's time over its time to
    the previous threshold (over the runs that reached both)."""
    rows, previous = [], None
    for level in levels:
        per_run = [{"run": r.folder, "seed": r.seed, "time_s": r.time_to(level), "epoch": r.epoch_to(level),
                    "short_by": None if r.time_to(level) is not None else level - r.best_top1,
                    "end_clock_s": r.end_clock} for r in records]
        times = [x["time_s"] for x in per_run]
        # the step's cost, run by run: only the runs that reached both thresholds have one
        steps = [] if previous is None else [t / p for t, p in zip(times, previous, strict=True)
                                             if t is not None and p]
        rows.append({"threshold": level, "reached": reached_fraction(times),
                     "time_s": describe([t for t in times if t is not None]),
                     "ratio_to_previous": describe(steps)["mean"], "runs": per_run})
        previous = times
    coarse = [r.folder for r in records if not r.evaluated_every_epoch()]
    return {"command": COMMAND, "thresholds": list(levels), "levels": rows,
            "runs": [{"run": r.folder, "seed": r.seed, "final_top1": r.final_top1, "best_top1": r.best_top1,
                      "path": str(r.path)} for r in records],
            # the epochs without an evaluation hide when a threshold was crossed
            "not_evaluated_every_epoch": coarse}


def render(data: dict) -> str:
    runs = data["runs"]
    head = ["threshold", *(f"s{r['seed']}" for r in runs), "mean (reached)", "reached",
            "x previous (per run)"]
    rows = []
    for lv in data["levels"]:
        ratio = "-" if lv["ratio_to_previous"] is None else f"{lv['ratio_to_previous']:.2f}"
        rows.append([fmt_pct(lv["threshold"]), *(fmt_time(x["time_s"]) for x in lv["runs"]),
                     fmt_mean_std(lv["time_s"], unit=" s"), f"{lv['reached']['reached']}/{len(runs)}", ratio])
    lines = [f"thresholds: time to each accuracy, {len(runs)} run(s) (clock seconds at the first charged "
             "evaluation at or above it)", table(head, rows)]
    for lv in data["levels"]:
        for x in lv["runs"]:
            if x["time_s"] is None:
                lines.append(f"  {x['run']} never reached {fmt_pct(lv['threshold'])}: its best evaluation "
                             f"was {100 * x['short_by']:.2f} points short (run ended at "
                             f"{x['end_clock_s']:.1f} s)")
    if data["not_evaluated_every_epoch"]:
        lines.append("note: not evaluated every epoch (train with --eval-every 1), so their times are "
                     f"resolved only to the epochs evaluated: {', '.join(data['not_evaluated_every_epoch'])}")
    return "\n".join(lines)


def figure(plt: Any, data: dict) -> Any:
    """Time against threshold, one line per run and the mean over the runs that
    reached each threshold; a run's missing threshold is an x on the top edge."""
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    xs = [100 * lv["threshold"] for lv in data["levels"]]
    reached = [x["time_s"] for lv in data["levels"] for x in lv["runs"] if x["time_s"] is not None]
    top = 1.1 * max(reached + [x["end_clock_s"] for lv in data["levels"] for x in lv["runs"]])
    step = min((b - a for a, b in zip(xs, xs[1:], strict=False)), default=1.0)
    for i, run in enumerate(data["runs"]):
        ys = [lv["runs"][i]["time_s"] for lv in data["levels"]]
        line, = ax.plot(xs, [gap(y) for y in ys], "o-", ms=4, alpha=0.6,
                        label=f"s{run['seed']}")
        # each run's x a little apart, so that two runs missing one threshold show as two
        nudge = step * 0.04 * (i - len(data["runs"]) / 2)
        missed = [x + nudge for x, y in zip(xs, ys, strict=True) if y is None]
        ax.plot(missed, [top] * len(missed), "x", ms=9, color=line.get_color())
    means = [lv["time_s"]["mean"] for lv in data["levels"]]
    ax.plot(xs, [gap(m) for m in means], "s-", color="k", lw=2, label="mean (reached)")
    for x, lv in zip(xs, data["levels"], strict=True):
        ax.annotate(f"{lv['reached']['reached']}/{lv['reached']['runs']}", (x, top * 1.04), ha="center",
                    va="bottom", fontsize=7)
    ax.set(xlabel="threshold, test top-1 %", ylabel="time to threshold, s (clock)", ylim=(0, top * 1.12),
           title="time to each threshold (x on top: not reached; k/n reached)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig
