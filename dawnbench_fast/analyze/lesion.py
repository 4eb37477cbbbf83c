"""``lesion``: switch off one lever at a time and measure what it was worth:
each arm's time to accuracy and final accuracy against the baseline arm (the
recipe as it is), the same seeds in every arm.

The levers and their switches (:func:`lever_arms`) are the trainer's own
flags and recipe fields; the recipe levers are found, not listed: every field
in which the chosen recipe differs from the published airbench94_muon preset
(dawnbench_fast.cifar.recipe.RECIPES) is an arm set back to airbench's value.
Every lever the issue names has its switch: Muon (``filter_optimizer``), the
alternating flip (``flip_alternating``) and whitening (``first_conv``) too.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from dawnbench_fast.analyze import study_cli
from dawnbench_fast.analyze.report_files import fmt_mean_std, write_outputs
from dawnbench_fast.analyze.run_records import RunRecord
from dawnbench_fast.analyze.stats import describe, reached_fraction
from dawnbench_fast.analyze.training_runs import Arm, check_plan
from dawnbench_fast.cifar.recipe import RECIPES, CifarRecipe
from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.reporting.bench import table

COMMAND = "lesion"
DEFAULT_RUNS = 3
LOWER_TARGET = 0.93  # arms without a lever may miss 94% altogether: 93% keeps their times comparable
BASELINE = "baseline"
PUBLISHED = "airbench94_muon"
ALL_RECIPE_FIELDS = "recipe_all"

# (name, what switching it off means, trainer flags)
LEVERS: tuple[tuple[str, str, list[str]], ...] = (
    ("kernels_torch", "our kernels off: every custom op by its PyTorch reference", ["--kernels", "torch"]),
    ("fp32", "reduced precision off: fp32, no autocast", ["--set", "precision=fp32"]),
    ("no_channels_last", "channels_last off: PyTorch's default layout", ["--set", "channels_last=false"]),
    ("no_tta", "test-time augmentation off: one view", ["--set", "tta_level=0"]),
    ("no_label_smoothing", "label smoothing off", ["--set", "label_smoothing=0"]),
    ("muon_to_sgd", "Muon off: the conv filters in Nesterov SGD like the biases, at lr_filters_sgd "
     "(airbench94's SGD filter rate)", ["--set", "filter_optimizer=sgd"]),
    ("muon_no_orthogonalisation", "Muon's Newton-Schulz orthogonalisation off (ns_steps=0): the "
     "momentum is only scaled to unit norm, a normalised SGD", ["--set", "ns_steps=0"]),
    ("random_flip", "the alternating flip off: a fresh random flip every epoch",
     ["--set", "flip_alternating=false"]),
    ("no_flip", "every flip off (flip=false)", ["--set", "flip=false"]),
    ("no_whitening", "the patch-whitening init off: the first conv learned from a random init like "
     "the others", ["--set", "first_conv=learned"]),
    # the speed issue's kernel levers, one at a time (kernels_torch takes them all off)
    ("wgrad_onednn", "our conv weight-gradient kernels off: oneDNN's (aten) for every conv",
     ["--set", "conv_wgrad=aten"]),
    ("wgrad_no_pooled", "the weight gradient before a max-pool off: our dense kernel for every conv",
     ["--set", "conv_wgrad=dpbf16"]),
    ("dgrad_onednn", "the data gradient before a max-pool off: oneDNN's dense one for every conv",
     ["--set", "conv_dgrad=aten"]),
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(COMMAND, help="one lever off at a time: each arm's time to accuracy and final "
                       "accuracy against the baseline", description=__doc__)
    study_cli.add_common_args(p)
    study_cli.add_study_args(p, runs=DEFAULT_RUNS, target=LOWER_TARGET)
    p.add_argument("--arms", default=None, metavar="NAME,NAME,...",
                   help="run only these arms (the baseline always runs); default: all (--list-arms)")
    p.add_argument("--list-arms", action="store_true", help="print the arms and their switches")
    p.set_defaults(command_fn=run)


def _set_text(value: object) -> str:
    """A field value as ``--set`` reads it (dawnbench_fast.config.overrides.parse_value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return repr(value) if isinstance(value, float) else str(value)


def recipe_arms(recipe: str) -> list[Arm]:
    """One arm per field in which ``recipe`` differs from airbench94_muon's
    preset, set back to the published value; with more than one such field,
    then ``recipe_all``: every one of them at once (the published recipe
    trained by our code), the recipe's values as one lever, whose effect one
    seed can resolve where a single field's is often below the seed-to-seed
    spread."""
    ours, published = CifarRecipe(**RECIPES[recipe]), CifarRecipe(**RECIPES[PUBLISHED])
    arms = []
    for f in dataclasses.fields(CifarRecipe):
        mine, theirs = getattr(ours, f.name), getattr(published, f.name)
        if mine != theirs:
            arms.append(Arm(f"recipe_{f.name}", f"{f.name} {mine!r} -> {theirs!r} ({PUBLISHED}'s)",
                            ["--set", f"{f.name}={_set_text(theirs)}"]))
    if len(arms) > 1:
        arms.append(Arm(ALL_RECIPE_FIELDS, f"every recipe_ field at once: {PUBLISHED} as published",
                        [flag for a in arms for flag in a.flags]))
    return arms


def lever_arms(recipe: str) -> list[Arm]:
    """The baseline, then every lever with a switch."""
    return [Arm(BASELINE, "the recipe as it is"), *(Arm(n, w, list(f)) for n, w, f in LEVERS),
            *recipe_arms(recipe)]


def select(arms: list[Arm], names: str | None) -> list[Arm]:
    if names is None:
        return arms
    known = {a.name for a in arms}
    wanted = [n for n in names.split(",") if n]
    unknown = [n for n in wanted if n not in known]
    if unknown or not wanted:
        raise ConfigError(f"--arms {names}: unknown arm {', '.join(unknown) or '(none given)'}; known: "
                          f"{', '.join(sorted(known))}")
    return [a for a in arms if a.name == BASELINE or a.name in wanted]


def drop_no_ops(base: list[str], arms: list[Arm]) -> tuple[list[Arm], list[str]]:
    """Arms whose config is the baseline's (the lever is off already, e.g. by
    a trainer flag after --) are dropped, and said so."""
    configs = check_plan(base, arms)
    kept = [a for a in arms if a.name == BASELINE or configs[a.name] != configs[BASELINE]]
    return kept, [a.name for a in arms if a not in kept]


def run(args: argparse.Namespace) -> int:
    study_cli.check_study_args(args)
    arms = select(lever_arms(args.recipe or "dawnbench_fast"), args.arms)
    if args.list_arms:
        print("\n".join(f"{x.name}: {x.what} ({' '.join(x.flags) or 'no flags'})" for x in arms))
        return 0
    out = study_cli.resolve_out(args, COMMAND)
    target = study_cli.study_target(args)
    dropped: list[str] = []
    if args.sources is None:
        arms, dropped = drop_no_ops(study_cli.trainer_base(args, target), arms)
    records, failures = study_cli.collect_runs(args, out, arms, target)
    if args.sources is not None:
        target = study_cli.target_of_runs(args, {r.target for r in records})
    data = summarize(records, target, {x.name: x for x in arms})
    data.update(failed=study_cli.failures_json(failures), dropped_as_baseline=dropped)
    lines = [render(data), *study_cli.failure_lines(failures)]
    lines += [f"dropped (its config is the baseline's): {n}" for n in dropped]
    write_outputs(out, COMMAND, data, "\n".join(lines), lambda plt: figure(plt, data))
    return 0


def _delta(arm: float | None, base: float | None) -> float | None:
    return None if arm is None or base is None else arm - base


def summarize(records: list[RunRecord], target: float, known: dict[str, Arm]) -> dict:
    """Per arm (the runs' folder names, ``<arm>-s<seed>``): the time to target
    over the runs that reached it, the final accuracy, the end clock, and
    their differences from the baseline arm's means."""
    names = list(dict.fromkeys(r.arm for r in records))
    if BASELINE not in names:
        raise ConfigError(f"no {BASELINE} arm among the runs (folders named {BASELINE}-s<seed>): "
                          "nothing to compare the arms with")
    arms = {}
    for name in names:
        runs = [r for r in records if r.arm == name]
        times = [r.time_to(target) for r in runs]
        arms[name] = {"arm": name, "what": known[name].what if name in known else "(read with --from)",
                      "flags": known[name].flags if name in known else None,
                      "reached": reached_fraction(times),
                      "time_to_target_s": describe([t for t in times if t is not None]),
                      "final_top1": describe([r.final_top1 for r in runs]),
                      "end_clock_s": describe([r.end_clock for r in runs]),
                      "runs": [{"run": r.folder, "seed": r.seed, "time_to_target_s": r.time_to(target),
                                "final_top1": r.final_top1, "end_clock_s": r.end_clock, "path": str(r.path)}
                               for r in runs]}
    base = arms[BASELINE]
    for arm in arms.values():
        dt = _delta(arm["time_to_target_s"]["mean"], base["time_to_target_s"]["mean"])
        arm["effect"] = {
            "time_to_target_s": dt,
            "time_to_target_pct": None if dt is None else 100 * dt / base["time_to_target_s"]["mean"],
            "final_top1_points": 100 * _delta(arm["final_top1"]["mean"], base["final_top1"]["mean"]),
            "end_clock_s": _delta(arm["end_clock_s"]["mean"], base["end_clock_s"]["mean"]),
        }
    return {"command": COMMAND, "target": target, "target_note": study_cli.target_note(target),
            "arms": list(arms.values())}


def _signed(v: float | None, unit: str, digits: int = 1) -> str:
    return "not reached" if v is None else f"{v:+.{digits}f}{unit}"


def render(data: dict) -> str:
    rows = []
    for arm in data["arms"]:
        e = arm["effect"]
        pct = "" if e["time_to_target_pct"] is None else f" ({e['time_to_target_pct']:+.1f}%)"
        rows.append([arm["arm"], f"{arm['reached']['reached']}/{arm['reached']['runs']}",
                     fmt_mean_std(arm["time_to_target_s"], unit=" s"),
                     _signed(e["time_to_target_s"], " s") + pct,
                     fmt_mean_std(arm["final_top1"], 100, "%", 2), _signed(e["final_top1_points"], " pt", 2),
                     _signed(e["end_clock_s"], " s")])
    lines = [f"lesion: one lever off per arm, against the baseline; {data['target_note']}",
             table(["arm", "reached", "time to target", "vs baseline", "final top-1", "vs baseline",
                    "end clock vs baseline"], rows), ""]
    lines += [f"{arm['arm']}: {arm['what']}" for arm in data["arms"]]
    return "\n".join(lines)


def figure(plt: Any, data: dict) -> Any:
    """Per arm: time to target (mean over the runs that reached it; the end
    clock, hatched, where none did) and final accuracy with its confidence
    interval, the baseline and the target as lines."""
    arms = data["arms"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.45 * len(arms) + 1.8), dpi=110, sharey=True)
    ys = list(range(len(arms)))[::-1]
    for y, arm in zip(ys, arms, strict=True):
        t = arm["time_to_target_s"]["mean"]
        if t is not None:
            left.barh(y, t, color="#4c72b0")
        else:
            left.barh(y, arm["end_clock_s"]["mean"], color="none", edgecolor="#c00", hatch="//")
            left.annotate(" not reached", (arm["end_clock_s"]["mean"], y), va="center", fontsize=7)
        acc = arm["final_top1"]
        err = None if acc["ci"] is None else [[100 * (acc["mean"] - acc["ci"][0])],
                                              [100 * (acc["ci"][1] - acc["mean"])]]
        right.errorbar([100 * acc["mean"]], [y], xerr=err, fmt="o", color="#4c72b0", capsize=3)
    base = arms[[a["arm"] for a in arms].index(BASELINE)]
    if base["time_to_target_s"]["mean"] is not None:
        left.axvline(base["time_to_target_s"]["mean"], color="k", ls="--", lw=1)
    right.axvline(100 * base["final_top1"]["mean"], color="k", ls="--", lw=1, label="baseline")
    right.axvline(100 * data["target"], color="#c00", ls=":", lw=1, label="target")
    left.set(yticks=ys, yticklabels=[a["arm"] for a in arms], xlabel="time to target, s (hatched: end "
             "clock, not reached)", title=f"time to {100 * data['target']:.2f}%")
    right.set(xlabel="final test top-1, % (95% CI)", title="final accuracy")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig
