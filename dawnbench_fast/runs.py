"""``--runs N``: the seeds of one command, each trained under the clock,
measured (inference accuracy, one-image latency) and written out (DAWNBench
files, run.json, saved weights), then the summary of them all.

Recipe-agnostic: a recipe describes itself with a :class:`Recipe` (its task
factory, names, notes) and its CLI hands over the parsed shared flags
(dawnbench_fast.cli), so CIFAR and ImageNet runs report the same way.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dawnbench_fast import bench, dispatch
from dawnbench_fast.train import LoopResult, Phases, Task, batches_forever, measure_latency, train

# The warm-up task's seed: apart from any run's (seeds are small non-negative integers).
WARMUP_SEED = 2**31 - 1


@dataclass
class Recipe:
    """What the seed driver needs from a recipe besides its :class:`Task`."""

    entry: str  # the module run with -m (run.json's command)
    dataset: str  # report title: "DAWNBench <dataset> report"
    model_name: str  # DAWNBench model field and file-name part
    make_task: Callable[[Any], Task]  # config -> task on the already prepared data
    misc: Callable[[Any, str], dict]  # (config, backend) -> training JSON misc notes
    data: dict  # run.json "data": where the dataset came from
    save_model: Callable[[Task, Any, Path], None]  # --save-model
    extra_result: Callable[[str], dict] = field(default=lambda backend: {})  # recipe's result keys


@dataclass
class _Context:
    """What every seed of one command shares."""

    recipe: Recipe
    args: argparse.Namespace
    device: torch.device
    backend: str
    data_load_s: float
    env: dict
    stem: str
    ops: dict


def run_seeds(recipe: Recipe, cfg: Any, a: argparse.Namespace, device: torch.device, backend: str,
              data_load_s: float) -> int:
    """Run seeds ``cfg.seed .. cfg.seed + a.runs - 1``; print a line per run and
    the report; files go to ``a.out`` (``a.out/seedK`` with several runs)."""
    env = bench.environment(device, recipe.entry)
    hardware = env["hardware"]
    tag = a.hardware_tag or bench.slug(hardware)
    stem = bench.submission_names(a.author, recipe.model_name, tag, "pytorch")
    ctx = _Context(recipe, a, device, backend, data_load_s, env, stem, dispatch.op_table(backend))
    out = Path(a.out)
    summaries = []
    for k in range(a.runs):
        run_cfg = dataclasses.replace(cfg, seed=cfg.seed + k)
        summary = run_one(ctx, run_cfg, out / f"seed{run_cfg.seed}" if a.runs > 1 else out)
        summaries.append(summary)
        print(bench.run_line(summary, cfg.target), flush=True)
    print(bench.report_text(summaries, cfg, a.cost_per_hour, hardware, backend, recipe.dataset))
    if a.runs > 1:
        bench.write_json(out / "summary.json", {"config": dataclasses.asdict(cfg), "runs": summaries})
    print(f"reports written to {out}/")
    return 0


def run_one(ctx: _Context, cfg: Any, run_dir: Path) -> dict:
    """One seed: warm-up, training under the clock, inference measurements,
    DAWNBench files and run.json; returns run.json's ``result``."""
    a, recipe = ctx.args, ctx.recipe
    load_before = bench.load_average()  # run.json: was the machine idle?
    phases = Phases(ctx.device)
    phases.add("data_load", ctx.data_load_s)
    task = recipe.make_task(cfg)
    # The warm-up's throwaway task has a seed of its own, so nothing it touches
    # depends on the run's seed (it may only choose kernels).
    warm_cfg = dataclasses.replace(cfg, epochs=1, seed=WARMUP_SEED)
    result = train(task, phases, warm_up_task=lambda: recipe.make_task(warm_cfg), progress=not a.no_progress)
    entry = inference(task, result, a, phases, cfg.target)
    misc = {**recipe.misc(cfg, ctx.backend), "versions": ctx.env["versions"], "git": ctx.env["git"]["sha"]}
    base = bench.train_json(author=a.author, email=a.email, model=recipe.model_name,
                            hardware=ctx.env["hardware"], cost_per_hour=a.cost_per_hour,
                            log_filename=f"{ctx.stem}.tsv", misc=misc)
    inf_cost = bench.write_submission(
        run_dir, ctx.stem, base, result.rows, latency_ms=entry.latency_ms, inference_top1=entry.top1,
        cost_per_hour=a.cost_per_hour, inference_misc=entry.misc(cfg.target))
    summary = bench.run_summary(
        seed=cfg.seed, result=result, cost_per_hour=a.cost_per_hour, inference=entry,
        inference_cost_per_image=inf_cost, phases=phases.seconds, splits=task.splits.seconds,
        extra=recipe.extra_result(ctx.backend))
    bench.write_json(run_dir / "run.json", bench.run_json(
        env={**ctx.env, "loadavg": {"before": load_before, "after": bench.load_average()}},
        config=dataclasses.asdict(cfg), backend=ctx.backend, ops=ctx.ops, data=recipe.data,
        result=summary))
    if a.save_model:
        path = Path(a.save_model)
        if a.runs > 1:
            path = path.with_name(f"{path.stem}_seed{cfg.seed}{path.suffix}")
        recipe.save_model(task, cfg, path)
    return summary


@dataclass
class Inference:
    """DAWNBench's inference entry of one run: the procedure that produced the
    final accuracy (the final evaluation's views), timed one image at a time
    by that same procedure. ``valid`` is False when that accuracy is below the
    target: then it is no DAWNBench entry, and the file says so."""

    top1: float
    tta: bool
    latency_ms: float | None
    images: int | None
    valid: bool
    one_view: dict | None = None  # --latency-one-view: the faster single view, labelled

    def misc(self, target: float) -> dict:
        """The inference JSON's misc keys for this entry."""
        out: dict = {"valid": self.valid, "latency_images": self.images, "latency_tta": self.tta}
        if not self.valid:
            out["invalid_reason"] = (f"top-1 {100 * self.top1:.2f}% is below the {100 * target:.2f}% "
                                     "target: not a valid DAWNBench inference entry")
        if self.one_view is not None:
            out["one_view"] = self.one_view
        return out


def inference(task: Task, result: LoopResult, a: argparse.Namespace, phases: Phases,
              target: float) -> Inference:
    """Time the final model with the procedure of its final evaluation (with
    TTA where TTA is what reached the stated accuracy). With
    ``--latency-one-view`` and a TTA final evaluation, also the single view's
    accuracy (phase ``inference_eval``) and latency, for ``misc`` only."""
    final = result.final
    entry = Inference(final.top1, final.tta, None, None, final.top1 >= target)
    if not a.latency_images:
        return entry
    with phases.timed("latency"):
        entry.latency_ms, entry.images = measure_latency(task, final.tta, a.latency_images)
    if a.latency_one_view and final.tta:
        with phases.timed("inference_eval"):
            top1 = task.evaluate(tta=False).top1
        with phases.timed("latency"):
            ms, _ = measure_latency(task, False, a.latency_images)
        entry.one_view = {"latency_ms": ms, "top1Accuracy": round(100 * top1, 2),
                          "note": "one view, no TTA: faster, but not the procedure that reached "
                                  "the stated accuracy"}
    return entry


def profile_steps(task: Task, steps: int, out: Path) -> Path:
    """Profile ``steps`` training steps of ``task`` (after its model init) and
    write the roofline report set into ``out``; returns the report folder."""
    from dawnbench_fast import roofline

    task.init_model()
    batches = batches_forever(task)
    return roofline.profile_training(lambda: task.train_step(*next(batches)), steps, out,
                                     device=str(task.device))
