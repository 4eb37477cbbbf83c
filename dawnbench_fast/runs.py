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
    phases = Phases(ctx.device)
    phases.add("data_load", ctx.data_load_s)
    task = recipe.make_task(cfg)
    result = train(task, phases, warm_up_task=lambda: recipe.make_task(dataclasses.replace(cfg, epochs=1)),
                   progress=not a.no_progress)
    infer_top1, lat_ms, lat_n = inference(task, result, a, phases)
    misc = {**recipe.misc(cfg, ctx.backend), "versions": ctx.env["versions"], "git": ctx.env["git"]["sha"]}
    base = bench.train_json(author=a.author, email=a.email, model=recipe.model_name,
                            hardware=ctx.env["hardware"], cost_per_hour=a.cost_per_hour,
                            log_filename=f"{ctx.stem}.tsv", misc=misc)
    inf_cost = bench.write_submission(
        run_dir, ctx.stem, base, result.rows, latency_ms=lat_ms, inference_top1=infer_top1,
        cost_per_hour=a.cost_per_hour, inference_misc={"latency_images": lat_n, "latency_tta": a.latency_tta})
    summary = bench.run_summary(
        seed=cfg.seed, result=result, cost_per_hour=a.cost_per_hour, latency_ms=lat_ms,
        latency_images=lat_n, inference_top1=infer_top1, inference_cost_per_image=inf_cost,
        phases=phases.seconds, splits=task.splits.seconds, extra=recipe.extra_result(ctx.backend))
    bench.write_json(run_dir / "run.json", bench.run_json(
        env=ctx.env, config=dataclasses.asdict(cfg), backend=ctx.backend, ops=ctx.ops, data=recipe.data,
        result=summary))
    if a.save_model:
        path = Path(a.save_model)
        if a.runs > 1:
            path = path.with_name(f"{path.stem}_seed{cfg.seed}{path.suffix}")
        recipe.save_model(task, cfg, path)
    return summary


def inference(task: Task, result: LoopResult, a: argparse.Namespace,
              phases: Phases) -> tuple[float, float | None, int | None]:
    """(inference top-1, latency ms, images timed). The latency is measured
    without TTA unless ``--latency-tta``; then the accuracy it is quoted with
    is re-measured the same way (phase ``inference_eval``)."""
    top1 = result.final.top1
    if not a.latency_images:
        return top1, None, None
    if result.final.tta and not a.latency_tta:
        with phases.timed("inference_eval"):
            top1 = task.evaluate(tta=False).top1
    with phases.timed("latency"):
        lat_ms, lat_n = measure_latency(task, a.latency_tta, a.latency_images)
    return top1, lat_ms, lat_n


def profile_steps(task: Task, steps: int, out: Path) -> Path:
    """Profile ``steps`` training steps of ``task`` (after its model init) and
    write the roofline report set into ``out``; returns the report folder."""
    from dawnbench_fast import roofline

    task.init_model()
    batches = batches_forever(task)
    return roofline.profile_training(lambda: task.train_step(*next(batches)), steps, out,
                                     device=str(task.device))
