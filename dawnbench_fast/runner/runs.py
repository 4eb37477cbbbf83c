"""``--runs N``: the seeds of one command, each trained under the clock,
measured (inference accuracy, one-image latency) and written out (DAWNBench
files, run.json, saved weights), then the summary of them all.

Recipe-agnostic: a recipe describes itself with a :class:`Recipe` (its task
factory, names, notes) and its CLI hands over the parsed shared flags
(dawnbench_fast.runner.cli), so CIFAR and ImageNet runs report the same way.

In a torchrun job (dawnbench_fast.execution.distributed) every rank trains and
evaluates its share; only rank 0 writes (logs, checkpoints, DAWNBench files,
run.json, saved weights) and measures the one-image latency.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dawnbench_fast import atomic, dispatch
from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.execution import gpu_defaults
from dawnbench_fast.execution.distributed import World, world
from dawnbench_fast.hardware import gpu_info
from dawnbench_fast.hardware.machine import load_average
from dawnbench_fast.reporting import bench, run_log, run_report
from dawnbench_fast.runner import outcome, stopping
from dawnbench_fast.training import checkpoint, readback
from dawnbench_fast.training.latency import Latency, measure_latency
from dawnbench_fast.training.task import Task
from dawnbench_fast.training.train import LoopResult, Phases, batches_forever, train, warm_up

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
    # the recipe's own result keys, from the trained task and the backend
    extra_result: Callable[[Task, str], dict] = field(default=lambda task, backend: {})
    target_metric: str = "top1"  # the accuracy compared with the target: "top1" or "top5" (ImageNet)
    ops: list[str] | None = None  # the catalogued ops the recipe uses (run.json's ops; None: all)


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
    world: World


def run_seeds(recipe: Recipe, cfg: Any, args: argparse.Namespace, device: torch.device, backend: str,
              data_load_s: float) -> int:
    """Run seeds ``cfg.seed .. cfg.seed + a.runs - 1``; print a line per run and
    the report; files go to ``args.out`` (``args.out/seedK`` with several runs).
    With ``--resume`` a finished seed is read back, a checkpointed one goes on."""
    # what the run did of the published GPU defaults (compile, cuDNN autotuning, the clock)
    w = world()
    env = {**bench.environment(device, recipe.entry), "execution": gpu_defaults.execution_record(device, cfg),
           "world": w.record()}
    hardware = env["hardware"]
    tag = args.hardware_tag or bench.slug(args.hardware or hardware)
    stem = bench.submission_names(args.author, recipe.model_name, tag, "pytorch")
    ctx = _Context(recipe, args, device, backend, data_load_s, env, stem,
                   dispatch.op_table(backend, recipe.ops), w)
    out = Path(args.out)
    summaries = []
    for run_cfg, run_dir in seed_runs(cfg, args):
        try:
            summary = finished_summary(run_dir, run_cfg) if args.resume else None
            if summary is None:
                with out_of_memory_hint(run_cfg.batch_size, device):
                    summary = run_one(ctx, run_cfg, run_dir)
        except KeyboardInterrupt as e:  # ^C, or SIGTERM (stopping.py): the last checkpoint is whole
            what = "terminated (SIGTERM)" if isinstance(e, stopping.Terminated) else "interrupted"
            hint = stopping.resume_hint(run_dir / checkpoint.RUN_CHECKPOINT, out, recipe.entry)
            sys.stderr.write(f"{what}: {hint}\n")
            raise
        except atomic.WriteFailed as e:  # a full disk: one line, the last checkpoint kept
            hint = stopping.resume_hint(run_dir / checkpoint.RUN_CHECKPOINT, out, recipe.entry)
            raise e.with_hint(f"the files written before are kept; free space, then: {hint}") from None
        summaries.append(summary)
        if w.main:
            print(bench.run_line(summary, cfg.target), flush=True)
    if not w.main:
        return 0
    # the console summary, kept: report.txt holds exactly what is printed
    text = summary_text(ctx, cfg, summaries)
    gaps = outcome.submission_line(args)  # what a submission of these files still lacks
    text += f"{gaps}\n" if gaps else ""
    print()
    print(text, end="")
    atomic.write_text(out / run_report.TEXT_NAME, text)
    if args.runs > 1:
        atomic.write_json(out / "summary.json", {"config": dataclasses.asdict(cfg), "runs": summaries})
        seeds = range(cfg.seed, cfg.seed + args.runs)
        run_report.write_report(out, [out / f"seed{s}" for s in seeds],
                                f"DAWNBench {recipe.dataset} report: seeds {seeds[0]}-{seeds[-1]}")
    print(f"reports written to {out}/")
    status = outcome.exit_status(summaries, args)
    if status:
        print(outcome.missed_line(summaries, cfg.target), file=sys.stderr)
    return status


def seed_runs(cfg: Any, args: argparse.Namespace) -> list[tuple[Any, Path]]:
    """Each seed's config and folder: ``--out`` itself for one run,
    ``--out/seedK`` for each of ``--runs N``."""
    out, runs = Path(args.out), []
    for k in range(args.runs):
        run_cfg = dataclasses.replace(cfg, seed=cfg.seed + k)
        runs.append((run_cfg, out / f"seed{run_cfg.seed}" if args.runs > 1 else out))
    return runs


def check_resumed_records(cfg: Any, args: argparse.Namespace) -> None:
    """``--resume``: every record the command will read back, read back now,
    before the data is read and before anything is trained or written: each
    seed's run.json (a finished seed) or checkpoint.pt (an interrupted one),
    and its epochs.jsonl. A damaged one is one line naming it
    (readback.Damaged, exit status 2), the folder left as it was; without
    this a damaged run.json met after the other seeds had trained, or a
    damaged log met after the warm-up, ended in a traceback."""
    for run_cfg, run_dir in seed_runs(cfg, args):
        log = run_dir / run_log.LOG_NAME
        if (run_dir / "run.json").exists():
            run_log.check_log(log)  # before the report check below reads it
            finished_summary(run_dir, run_cfg, report=args.runs > 1)
        elif (path := run_dir / checkpoint.RUN_CHECKPOINT).exists():
            saved = checkpoint.load_run(path, dataclasses.asdict(run_cfg))
            run_log.check_log(log, saved["loop"]["epochs_done"])


def summary_text(ctx: _Context, cfg: Any, summaries: list[dict]) -> str:
    """The summary of ``summaries`` (run.json results) as printed and as
    report.txt holds it: the runs, the outcome, where the time goes."""
    return bench.report_text(summaries, cfg, ctx.args.cost_per_hour, ctx.env["hardware"], ctx.backend,
                             ctx.recipe.dataset, ctx.env["gpu"]).lstrip("\n") + "\n"


@contextmanager
def out_of_memory_hint(batch_size: int, device: torch.device) -> Iterator[None]:
    """Device out-of-memory as one line that says what to change."""
    try:
        yield
    except torch.OutOfMemoryError:
        raise ConfigError(f"--batch-size {batch_size}: out of {device.type.upper()} memory on {device}; "
                          f"try --batch-size {max(1, batch_size // 2)} (the last checkpoint, if any, "
                          "is kept: --resume needs the same batch size)") from None


def finished_summary(run_dir: Path, cfg: Any, report: bool = False) -> dict | None:
    """A resumed command's seed that had already finished: its run.json's
    result (when its config is this seed's), else None (train or go on).

    The record is used as the command will use it: its console line and
    summary are made from it (and with ``report``, for a command of several
    seeds, the report page and figures that put them together), so that
    anything in it they cannot use is one line now (readback.Damaged), not a
    traceback after the other seeds have trained."""
    path = run_dir / "run.json"
    if not path.exists():
        return None
    done = readback.expect(path, readback.read_json(path), {"config": (dict,), "result": (dict,)})
    if done["config"] != json.loads(json.dumps(dataclasses.asdict(cfg))):
        raise ConfigError(f"--resume: {path} is a finished run of another config; "
                          "resume with the command that started it, or start a new --out")
    result = done["result"]
    with readback.reading(path):
        bench.run_line(result, cfg.target)
        bench.report_text([result], cfg, None, "", "", done.get("gpu"))
        if report:
            runs = run_report.load_runs([run_dir])
            run_report.render_html(runs, run_report.figures_png(runs), "")
    return result


def run_one(ctx: _Context, cfg: Any, run_dir: Path) -> dict:
    """One seed: warm-up, training under the clock with a checkpoint at each
    epoch's end (or going on from the last one with ``--resume``), inference
    measurements, DAWNBench files and run.json; returns run.json's ``result``."""
    a = ctx.args
    load_before = load_average()  # run.json: was the machine idle?
    energy = gpu_info.energy_reader(ctx.device)  # None off the GPU, without NVML or a counter
    joules_before = energy() if energy is not None else None
    phases = Phases(ctx.device, energy=energy)
    phases.add("data_load", ctx.data_load_s)
    task, result, resumed = train_resumable(ctx, cfg, run_dir, phases)
    entry = inference(task, result, a, phases, cfg.target, ctx.recipe.target_metric, ctx.world.main)
    if not ctx.world.main:  # rank 0 writes; the others have trained and evaluated their shares
        return {}
    gpu = {"gpu_energy_joules": None if energy is None else {
        "run": energy() - joules_before, "clock": phases.clock_joules, "phases": dict(phases.joules)},
        "gpu_clocks_mhz_after": gpu_info.clocks_now(ctx.device)}
    summary = write_outputs(ctx, cfg, run_dir, task, result, entry, phases)
    summary.update(resumed)
    summary.update(gpu)
    atomic.write_json(run_dir / "run.json", bench.run_json(
        env={**ctx.env, "loadavg": {"before": load_before, "after": load_average()}},
        config=dataclasses.asdict(cfg), backend=ctx.backend, ops=ctx.ops, data=ctx.recipe.data,
        result=summary))
    run_report.write_report(run_dir, [run_dir], f"DAWNBench {ctx.recipe.dataset} report: seed {cfg.seed}")
    if a.runs > 1:  # the seed's own summary (the command's goes above the seeds, as it is printed)
        atomic.write_text(run_dir / run_report.TEXT_NAME, summary_text(ctx, cfg, [summary]))
    if a.save_model:
        path = Path(a.save_model)
        if a.runs > 1:
            path = path.with_name(f"{path.stem}_seed{cfg.seed}{path.suffix}")
        ctx.recipe.save_model(task, cfg, path)
    return summary


def warm_up_config(cfg: Any) -> Any:
    """The config of the warm-up's throwaway task: a seed of its own, so that
    nothing it touches depends on the run's seed (it may only choose kernels
    and compile), and the run's length, so that its ``warm_up_epochs`` name an
    epoch of every training resolution the run meets (progressive
    resolution), each shape then selected and compiled outside the clock."""
    return dataclasses.replace(cfg, seed=WARMUP_SEED)


def warm_up_run(make_task: Callable[[Any], Task], cfg: Any) -> None:
    """The trainer's warm-up for ``cfg``'s run, its one entry point: a
    throwaway task of its own seed (:func:`warm_up_config`) made by
    ``make_task`` (which shares the run's state, where the recipe has one)
    through train.warm_up. Made after the run's own task, as a seed makes it."""
    warm_up(make_task(warm_up_config(cfg)))


def warm_up_only(recipe: Recipe, cfg: Any, device: torch.device, backend: str) -> dict:
    """Only the trainer's own warm-up, as :func:`train_resumable` runs it
    (the run's task made first, then the throwaway warm-up task: compile,
    the capture of the step's graphs, the evaluation's warm-up), timed as
    the trainer times it; nothing trained under the clock, nothing written.
    What ``--warm-up-only`` records: the seconds, the compile mode and the
    step's record (captured or eager, and why), so that a warm-up run ahead
    of time (on synthetic data, to fill the compile caches on disk) says
    what it compiled."""
    phases = Phases(device)
    task = recipe.make_task(cfg)  # as a seed does: the run's task exists before the warm-up's
    with phases.timed("warmup"):
        warm_up_run(recipe.make_task, cfg)
    execution = gpu_defaults.execution_record(device, cfg)
    return {"warmup_s": phases.seconds["warmup"], "compile_mode": execution["compile_mode"],
            "execution": execution, "device": str(device), "backend": backend,
            "step": recipe.extra_result(task, backend).get("step")}


def train_resumable(ctx: _Context, cfg: Any, run_dir: Path,
                    phases: Phases) -> tuple[Task, LoopResult, dict]:
    """Warm up, then train ``cfg`` (from its last checkpoint with --resume),
    writing a checkpoint at each epoch's end (phase ``checkpoint``, outside
    the clock). Returns the task, the loop's result and run.json's resume keys:
    how often the run was resumed and the wall time since it first started,
    interruptions included (the clock itself counts only the work)."""
    recipe, path = ctx.recipe, run_dir / checkpoint.RUN_CHECKPOINT
    config = dataclasses.asdict(cfg)
    saved = checkpoint.load_run(path, config) if ctx.args.resume and path.exists() else None
    task = recipe.make_task(cfg)
    with phases.timed("warmup"):
        warm_up_run(recipe.make_task, cfg)
    resume, wall_start, resumes = None, time.time(), 0
    if saved is not None:
        # the task's own state (load_run checked the rest): a tensor of another size, a key missing
        with readback.reading(path):
            for name, seconds in saved["phases"].items():
                phases.add(name, seconds)
            with phases.timed("checkpoint"):
                task.load_state_dict(saved["task"])
            resume, wall_start, resumes = LoopResult.from_dict(saved["loop"]), saved["wall_start"], \
                saved["resumes"] + 1
        print(f"seed {cfg.seed}: resumed from {path} after epoch {resume.epochs_done}", flush=True)

    # The log line goes out before the checkpoint: a kill between the two leaves
    # a line the resumed run cuts back (run_log.EpochLog), never a gap.
    main = ctx.world.main
    sinks = run_log.sinks(run_dir, None if resume is None else resume.epochs_done,
                          tensorboard=ctx.args.tensorboard) if main else []

    def save(result: LoopResult) -> None:
        if not main:
            return
        with phases.timed("epoch_log"):
            record = run_log.epoch_record(cfg.seed, result, run_log.learning_rates(task), phases.clock,
                                          time.time() - wall_start)
            for sink in sinks:
                sink.append(record)
        state = dict(config=config, task_state=task.state_dict(), loop=result.to_dict(),
                     phases=phases.seconds, wall_start=wall_start, resumes=resumes)
        with phases.timed("checkpoint"):
            checkpoint.save_run(path, **state)

    try:
        result = train(task, phases, progress=main and not ctx.args.no_progress, on_epoch_end=save,
                       resume=resume, target_metric=recipe.target_metric)
    finally:
        for sink in sinks:
            sink.close()
    return task, result, {"resumed": resumes, "wall_seconds_since_start": time.time() - wall_start}


def write_outputs(ctx: _Context, cfg: Any, run_dir: Path, task: Task, result: LoopResult,
                  entry: Inference, phases: Phases) -> dict:
    """The DAWNBench files of one run; returns run.json's ``result``."""
    a, recipe = ctx.args, ctx.recipe
    misc = {**recipe.misc(cfg, ctx.backend), "versions": ctx.env["versions"], "git": ctx.env["git"]["sha"]}
    base = bench.train_json(author=a.author, email=a.email, model=recipe.model_name,
                            hardware=a.hardware or ctx.env["hardware"], cost_per_hour=a.cost_per_hour,
                            log_filename=f"{ctx.stem}.tsv", misc=misc, code_url=a.code_url)
    inf_cost = bench.write_submission(
        run_dir, ctx.stem, base, result.rows, latency_ms=entry.latency_ms, inference_top1=entry.top1,
        cost_per_hour=a.cost_per_hour, inference_misc=entry.misc(cfg.target), inference_top5=entry.top5)
    return bench.run_summary(
        seed=cfg.seed, result=result, cost_per_hour=a.cost_per_hour, inference=entry,
        inference_cost_per_image=inf_cost, phases=phases.seconds, splits=task.splits.seconds,
        extra={"target_metric": recipe.target_metric, **recipe.extra_result(task, ctx.backend)})


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
    top5: float | None = None  # where the recipe measures it (ImageNet's target is top-5)
    metric: str = "top1"  # the accuracy ``valid`` compares with the target
    latency: Latency | None = None  # the timed loop, with the accuracy of its own predictions

    def loop_record(self) -> dict:
        """run.json's (and the inference JSON misc's) keys on the latency
        loop's own predictions: their accuracy over ``latency_images``, the
        test set's size, and whether they agree with the batched evaluation
        (null unless the loop saw the whole test set)."""
        lat = self.latency
        if lat is None:
            return {"latency_top1": None, "latency_top5": None, "latency_test_images": None,
                    "latency_matches_batched": None}

        def same(loop: float | None, batched: float | None) -> bool:
            # counts, not fractions: equal when the same number of images were right
            return loop is None or batched is None or round(loop * lat.images) == round(batched * lat.images)

        agree = same(lat.top1, self.top1) and same(lat.top5, self.top5) if lat.whole_test_set else None
        return {"latency_top1": lat.top1, "latency_top5": lat.top5, "latency_test_images": lat.test_images,
                "latency_matches_batched": agree}

    def misc(self, target: float) -> dict:
        """The inference JSON's misc keys for this entry."""
        out: dict = {"valid": self.valid, "latency_images": self.images, "latency_tta": self.tta}
        if self.latency is not None:
            loop = self.loop_record()
            out.update(loop, latency_note=bench.latency_accuracy_note(
                {**loop, "latency_images": self.images, "inference_top1": self.top1,
                 "inference_top5": self.top5}))
        if not self.valid:
            value = self.top1 if self.metric == "top1" else (self.top5 or 0.0)
            out["invalid_reason"] = (f"{self.metric[:3]}-{self.metric[3:]} {100 * value:.2f}% is below the "
                                     f"{100 * target:.2f}% target: not a valid DAWNBench inference entry")
        if self.one_view is not None:
            out["one_view"] = self.one_view
        return out


def inference(task: Task, result: LoopResult, args: argparse.Namespace, phases: Phases,
              target: float, metric: str = "top1", timed: bool = True) -> Inference:
    """Time the final model with the procedure of its final evaluation (with
    TTA where TTA is what reached the stated accuracy), scoring the timed
    loop's own predictions (``Inference.loop_record``). With
    ``--latency-one-view`` and a TTA final evaluation, also the single view's
    accuracy (phase ``inference_eval``) and latency, for ``misc`` only.
    ``metric``: the accuracy compared with ``target``. ``timed`` False (the
    ranks but 0 of a torchrun job): only the evaluation, which is sharded."""
    final = result.final
    reached = (final.top1 if metric == "top1" else final.top5 or 0.0) >= target
    entry = Inference(final.top1, final.tta, None, None, reached, top5=final.top5, metric=metric)
    if not args.latency_images:
        return entry
    if timed:
        with phases.timed("latency"):
            entry.latency = measure_latency(task, final.tta, args.latency_images, top5=final.top5 is not None)
        entry.latency_ms, entry.images = entry.latency.ms, entry.latency.images
    if args.latency_one_view and final.tta:
        with phases.timed("inference_eval"):
            top1 = task.evaluate(tta=False).top1
        if not timed:
            return entry
        with phases.timed("latency"):
            ms = measure_latency(task, False, args.latency_images).ms
        entry.one_view = {"latency_ms": ms, "top1Accuracy": round(100 * top1, 2),
                          "note": "one view, no TTA: faster, but not the procedure that reached "
                                  "the stated accuracy"}
    return entry


def profile_steps(task: Task, steps: int, out: Path, timer: str = "auto",
                  warm: Callable[[], None] | None = None) -> Path:
    """Profile ``steps`` training steps of ``task`` (after ``warm``, the
    trainer's warm-up where given, and its model init) and write the roofline
    report set into ``out`` (with the device timeline where the trace has
    device activity: roofline/timeline.py); returns the report folder.
    ``timer``: inplace, profiler, or auto (inplace on the CPU: the profiler
    changed some CPU ops' times 2-3x, roofline/inplace.py)."""
    from dawnbench_fast import roofline
    if timer == "auto":
        timer = "profiler" if task.device.type == "cuda" else "inplace"
    if warm is not None:
        warm()
    task.init_model()
    batches = batches_forever(task)
    # in place, two warm-up steps: the kept heap settles within a few (runtime.keep_freed_memory)
    return roofline.profile_training(lambda: task.train_step(*next(batches)), steps, out,
                                     device=str(task.device), timer=timer,
                                     warmup=2 if timer == "inplace" else 1)
