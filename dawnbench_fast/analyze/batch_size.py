"""``batch-size``: the DAWNBench paper's Figure 1 for this recipe: time to
accuracy against the batch size, with the training throughput beside it.
Every size is trained with ``--eval-every 1``, so the epochs to the target
and the time to it are read from the rows.

The learning-rate rule (:func:`scaled_lrs`), from how the recipe defines its
rates (dawnbench_fast.cifar.build_optimizers): the loss is summed over the
batch, not averaged, so the Nesterov SGD rates (``lr_bias``, ``lr_head``) and
both weight decays (given per example and multiplied by the batch) are
already per-example rates: the step grows with the batch by itself, which is
the linear scaling rule, and they are left as they are. Muon's ``lr_filters``
is not: Muon orthogonalises the momentum, whose size then no longer follows
the gradient's, so the batch reaches its step only through the rate. It is
scaled by the square root of the batch ratio to the recipe's own batch (the
rule for normalised updates, as for Adam), ``--lr-rule linear`` scales it in
proportion, ``none`` leaves it. The epochs stay the recipe's.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from dawnbench_fast.analyze import study_cli
from dawnbench_fast.analyze.report_files import fmt_mean_std, fmt_pct, gap, write_outputs
from dawnbench_fast.analyze.run_records import RunRecord
from dawnbench_fast.analyze.stats import describe, reached_fraction
from dawnbench_fast.analyze.training_runs import Arm, resolve_config
from dawnbench_fast.reporting.bench import table

COMMAND = "batch-size"
DEFAULT_RUNS = 2
DEFAULT_SIZES = (256, 512, 1024, 2000)
LOWER_TARGET = 0.93  # 94% at every size would take hours a size on a CPU: the output says so
LR_RULES = {"sqrt": 0.5, "linear": 1.0, "none": 0.0}  # the power of (batch / recipe's batch)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(COMMAND, help="time to accuracy and throughput against the batch size (learning "
                       "rates scaled by a stated rule)", description=__doc__)
    study_cli.add_common_args(p)
    study_cli.add_study_args(p, runs=DEFAULT_RUNS, target=LOWER_TARGET)
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), metavar="B,B,...",
                   help="batch sizes, comma-separated")
    p.add_argument("--lr-rule", choices=sorted(LR_RULES), default="sqrt",
                   help="how lr_filters (Muon) follows the batch; the SGD rates are per example already")
    p.set_defaults(command_fn=run)


def parse_sizes(text: str) -> tuple[int, ...]:
    """``256,512`` -> (256, 512), sorted; a one-line error for anything else."""
    return study_cli.comma_list("--sizes", text, int, "256,512,1024,2000", lambda v: v >= 1,
                                "batch sizes must be >= 1")


def scaled_lrs(lr_filters: float, recipe_batch: int, batch: int, rule: str = "sqrt") -> dict[str, float]:
    """The learning rates that change with the batch: only Muon's (the module
    docstring says why the SGD rates and weight decays stay)."""
    return {"lr_filters": lr_filters * (batch / recipe_batch) ** LR_RULES[rule]}


def arms(base: list[str], sizes: tuple[int, ...], rule: str) -> list[Arm]:
    """One arm per batch size, its rates scaled from the base config's."""
    cfg = resolve_config(base)
    out = []
    for b in sizes:
        lrs = scaled_lrs(cfg.lr_filters, cfg.batch_size, b, rule)
        sets = [x for name, v in lrs.items() for x in ("--set", f"{name}={v!r}")]
        what = f"batch {b}, " + ", ".join(f"{k} {v:.4g}" for k, v in lrs.items())
        out.append(Arm(f"batch{b}", what, ["--batch-size", str(b), *sets]))
    return out


def run(args: argparse.Namespace) -> int:
    study_cli.check_study_args(args)
    sizes = parse_sizes(args.sizes)
    out = study_cli.resolve_out(args, COMMAND)
    target = study_cli.study_target(args)
    every = ["--eval-every", "1"]
    planned = []
    if not args.sources:
        planned = arms(study_cli.trainer_base(args, target, every, quick_batch=False), sizes, args.lr_rule)
    records, failures = study_cli.collect_runs(args, out, planned, target, extra=every, quick_batch=False)
    if args.sources is not None:
        target = study_cli.target_of_runs(args, {r.target for r in records})
    data = summarize(records, target, args.lr_rule if args.sources is None else None)
    data["failed"] = study_cli.failures_json(failures)
    text = "\n".join([render(data), *study_cli.failure_lines(failures)])
    write_outputs(out, COMMAND, data, text, lambda plt: figure(plt, data))
    return 0


def summarize(records: list[RunRecord], target: float, rule: str | None) -> dict:
    """Per batch size (each run's config.batch_size): epochs and time to the
    target, training throughput (images/s over the training phase), the end
    clock, the trainer process's wall time where this study ran it."""
    sizes = sorted({int(r.config["batch_size"]) for r in records})
    rows = []
    for b in sizes:
        runs = [r for r in records if int(r.config["batch_size"]) == b]
        times = [r.time_to(target) for r in runs]
        rows.append({
            "batch_size": b, "lr_filters": sorted({r.config["lr_filters"] for r in runs}),
            "reached": reached_fraction(times),
            "epochs_to_target": describe([e for r in runs if (e := r.epoch_to(target)) is not None]),
            "time_to_target_s": describe([t for t in times if t is not None]),
            "throughput_img_s": describe([t for r in runs if (t := r.throughput()) is not None]),
            "end_clock_s": describe([r.end_clock for r in runs]),
            "process_wall_s": describe([r.wall_seconds for r in runs if r.wall_seconds is not None]),
            "final_top1": describe([r.final_top1 for r in runs]),
            "runs": [{"run": r.folder, "seed": r.seed, "time_to_target_s": r.time_to(target),
                      "epoch_to_target": r.epoch_to(target), "final_top1": r.final_top1,
                      "throughput_img_s": r.throughput(), "path": str(r.path)} for r in runs],
        })
    rule_text = ("as the runs were trained (read with --from)" if rule is None else
                 f"lr_filters x (batch / recipe batch)^{LR_RULES[rule]} ({rule}); SGD rates and weight "
                 "decays unchanged (per example: the loss is summed over the batch)")
    return {"command": COMMAND, "target": target, "target_note": study_cli.target_note(target),
            "lr_rule": rule, "lr_rule_text": rule_text, "sizes": rows}


def render(data: dict) -> str:
    rows = [[str(s["batch_size"]), ", ".join(f"{v:.4g}" for v in s["lr_filters"]),
             f"{s['reached']['reached']}/{s['reached']['runs']}", fmt_mean_std(s["epochs_to_target"]),
             fmt_mean_std(s["time_to_target_s"], unit=" s"), fmt_mean_std(s["throughput_img_s"], digits=0),
             fmt_mean_std(s["end_clock_s"], unit=" s"), fmt_pct(s["final_top1"]["mean"])]
            for s in data["sizes"]]
    return "\n".join([
        f"batch-size: {data['target_note']}",
        f"learning rates: {data['lr_rule_text']}",
        table(["batch", "lr_filters", "reached", "epochs to target", "time to target", "images/s (train)",
               "end clock", "final top-1"], rows)])


def figure(plt: Any, data: dict) -> Any:
    """Time to accuracy against the batch size (each run, the mean; x on the
    top edge where no run of a size reached the target), throughput on the
    right axis: the shape of the DAWNBench paper's Figure 1."""
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    sizes = data["sizes"]
    xs = [s["batch_size"] for s in sizes]
    ends = [r_end for s in sizes if (r_end := s["end_clock_s"]["mean"]) is not None]
    top = 1.1 * max(ends + [t for s in sizes for r in s["runs"] if (t := r["time_to_target_s"]) is not None])
    for s in sizes:
        pts = [r["time_to_target_s"] for r in s["runs"] if r["time_to_target_s"] is not None]
        ax.plot([s["batch_size"]] * len(pts), pts, ".", color="#4c72b0", alpha=0.5)
        if not pts:
            ax.plot([s["batch_size"]], [top], "x", ms=10, color="#c00")
    means = [gap(s["time_to_target_s"]["mean"]) for s in sizes]
    ax.plot(xs, means, "o-", color="#4c72b0", label=f"time to {100 * data['target']:.2f}% (mean)")
    ax.set(xscale="log", xlabel="batch size", ylabel="time to accuracy, s (clock)", ylim=(0, top * 1.05),
           title="time to accuracy and throughput against the batch size (x: not reached)")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.minorticks_off()
    right = ax.twinx()
    thr = [gap(s["throughput_img_s"]["mean"]) for s in sizes]
    right.plot(xs, thr, "s--", color="#dd8452", label="training throughput")
    right.set_ylabel("training images/s")
    known = [t for t in thr if not math.isnan(t)]
    right.set_ylim(0, 1.15 * max(known) if known else 1.0)
    handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
