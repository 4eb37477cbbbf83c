"""The in-step benchmark (issue 46): the CIFAR training step timed as the
trainer runs it, captured and replayed, with ``--kernels torch`` and with
each of our faces switched in one op at a time.

An *arm* is a kernel choice: ``torch``, ``auto`` or another whole backend,
or ``op=face`` (``bn_act=triton``; several joined by ``+``), which runs
that op on that face and every other op on torch's, through the same
:class:`~dawnbench_fast.dispatch.PerOpBackend` that ``--kernels auto`` on a
GPU hands the task. Each arm builds the recipe's task on its own
:class:`~dawnbench_fast.cifar.train_state.TrainState`, warms it up and
captures its graphs through the trainer's own path (train.warm_up on a
throwaway task of the warm-up's seed sharing the state, as runner/runs.py
does), then, on the timed task after its seed's init, replays each variant
of the step (cifar.capture_plan: side, whitening bias) ``replays`` times on
the first epoch at its side, timing each replay with CUDA events (the
host's perf_counter on the CPU, where the static step's body runs eagerly:
``capture=static``). An arm's step time is the run's: each variant's
median, p10 and p90 weighted by the steps that replay it. A few more
replays of each variant under torch.profiler give the step's kernel time by
kernel group (cifar.step_kernels; none on the CPU, whose trace holds no
device activity).

Cost: an arm with other kernels is another compiled graph and other CUDA
graphs, so on CUDA every arm runs in a process of its own (``isolate``:
fresh Dynamo caches and CUDA memory, and a faulting kernel ends only its
arm), paying the process start, the data's placement and the compile
warm-up (tens of seconds with Inductor's max-autotune-no-cudagraphs; the
Inductor and autotuning caches on disk shorten repeats). The budget stops
starting arms that the mean arm so far says would not finish in it, and a
running arm's process is ended at the budget; the result file is rewritten
atomically after every arm, so a command killed at its limit keeps what it
measured. benchmarks/bench_in_step.py is the command line;
docs/PERFORMANCE.md says how to run it on a GPU.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dawnbench_fast import atomic, dispatch
from dawnbench_fast.cifar.capture_plan import StepVariant
from dawnbench_fast.cifar.recipe import RECIPES, apply_overrides
from dawnbench_fast.cifar.static_step import first_epoch_at
from dawnbench_fast.cifar.step_kernels import group_times, weighted
from dawnbench_fast.cifar.task import CifarTask, Config
from dawnbench_fast.cifar.train_state import TrainState

SCHEMA_VERSION = 1
# The ops the CIFAR step calls, in the order their arms run (bn_act first: issue 46's question).
STEP_OPS = ("bn_act", "augment", "conv_group", "linear", "newton_schulz")
GPU_FACES = ("triton", "cuda")
# tiny shapes for the CPU dry run: seconds, not minutes (the static step's body, run eagerly);
# one thread: two spinning on a shared 2-core machine made a step 30x slower
DRY_RUN_SETS = ("subset=100", "eval_subset=50", "batch_size=50", "epochs=2", "whiten_images=50",
                "widths=8,16,16", "progressive=24", "whiten_bias_epochs=0", "lr_hold_epochs=0",
                "average_every=0", "tta_level=0", "capture=static", "compile=off", "precision=fp32",
                "threads=1")


@dataclass(frozen=True)
class Arm:
    """One kernel choice: a whole backend (``whole``) or faces for some ops."""

    name: str
    whole: str | None = None
    faces: dict[str, str] = field(default_factory=dict, hash=False)

    def single_op(self) -> tuple[str, str] | None:
        """(op, face) of an arm that switches exactly one op, else None."""
        return next(iter(self.faces.items())) if len(self.faces) == 1 else None


def parse_arm(text: str) -> Arm:
    """``torch``, ``auto``, ``triton``... or ``op=face[+op=face...]``; a bad
    one is a ValueError in one line."""
    text = text.strip()
    if "=" not in text:
        if text not in dispatch.KERNEL_CHOICES:
            raise ValueError(f"arm {text!r}: a backend ({', '.join(dispatch.KERNEL_CHOICES)}) or op=face")
        return Arm(text, whole=text)
    faces = {}
    for part in text.split("+"):
        op, _, face = part.partition("=")
        if op not in dispatch.CATALOGUE:
            raise ValueError(f"arm {text!r}: no op {op!r} (ops: {', '.join(dispatch.CATALOGUE)})")
        if face not in dispatch.KERNEL_CHOICES or face == "auto":
            raise ValueError(f"arm {text!r}: {face!r} is not a face (triton, cuda, cpu or torch)")
        faces[op] = face
    return Arm(text, faces=faces)


def arm_backend(arm: Arm, device: torch.device) -> str:
    """The backend the arm's task runs with: a concrete one, or a
    PerOpBackend (the arm's faces, torch's elsewhere). A face that cannot
    run here is dispatch.KernelsUnavailable, one line."""
    if arm.whole is not None:
        return dispatch.resolve_backend(arm.whole, device)
    choices, why = {}, {}
    for op in dispatch.CATALOGUE:
        face = arm.faces.get(op, "torch")
        if face != "torch":
            reason = dispatch.unavailable_reason(face, device)
            if reason is not None:
                raise dispatch.KernelsUnavailable(f"arm {arm.name}: {reason}")
            if dispatch.op_table(face, [op])[op]["backend"] != face:
                raise dispatch.KernelsUnavailable(f"arm {arm.name}: {op} has no {face} face")
        choices[op], why[op] = face, f"the in-step benchmark's arm {arm.name}"
    return dispatch.PerOpBackend(choices, why)


def default_arms(device: torch.device) -> list[str]:
    """torch, auto, then every face of the step's ops that can run on
    ``device``, one op at a time, in :data:`STEP_OPS`' order."""
    arms = ["torch", "auto"]
    faces = GPU_FACES if device.type == "cuda" else ("cpu",)
    for op in STEP_OPS:
        for face in faces:
            if (dispatch.unavailable_reason(face, device) is None
                    and dispatch.op_table(face, [op])[op]["backend"] == face):
                arms.append(f"{op}={face}")
    return arms


def build_config(recipe: str, sets: list[str], dry_run: bool = False) -> Config:
    """The named recipe with ``sets`` applied (``--set`` pairs), after the dry
    run's tiny shapes where asked."""
    if recipe not in RECIPES:
        raise ValueError(f"recipe {recipe!r}: one of {', '.join(sorted(RECIPES))}")
    cfg = dataclasses.replace(Config(), **RECIPES[recipe])
    return apply_overrides(cfg, [*(DRY_RUN_SETS if dry_run else ()), *sets])


def quantiles(ms: list[float]) -> dict:
    """median, p10, p90 and mean of ``ms``."""
    s = sorted(ms)
    pick = lambda q: s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]  # noqa: E731
    return {"median": statistics.median(s), "p10": pick(0.1), "p90": pick(0.9), "mean": statistics.fmean(s)}


def timed_replays(run: Callable[[int], None], n: int, device: torch.device) -> tuple[list[float], float]:
    """(each replay's ms, the block's ms per replay): CUDA events around each
    replay on the device's stream, read once at the end (no wait inside the
    block); on the CPU the host's clock."""
    if device.type == "cuda":
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        torch.cuda.synchronize(device)
        for i in range(n):
            ev[i][0].record()
            run(i)
            ev[i][1].record()
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) for s, e in ev], ev[0][0].elapsed_time(ev[-1][1]) / n
    ms = []
    t0 = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        run(i)
        ms.append(1e3 * (time.perf_counter() - t))
    return ms, 1e3 * (time.perf_counter() - t0) / n


class VariantRunner:
    """Replays of one variant of a task's step: its static inputs loaded
    with the i-th row of the first epoch at its side, then its graph
    replayed (its body run, where none was captured)."""

    def __init__(self, task: CifarTask, variant: StepVariant):
        self.task, self.variant = task, variant
        self.epoch = first_epoch_at(task, variant.side)
        self.rows = task.epoch_rows(self.epoch)

    def __call__(self, i: int) -> torch.Tensor:
        graphs, k = self.task.state.graphs, i % len(self.rows)
        graphs.static.load(self.rows[k], self.epoch, k, self.task.cfg.seed)
        self.last = graphs.run(self.task, self.variant)
        return self.last


def profile_variant(run: VariantRunner, n: int, device: torch.device) -> dict | None:
    """``n`` replays under torch.profiler: the kernel time by group
    (cifar.step_kernels), or None where the trace holds no device activity."""
    from dawnbench_fast.roofline.live import capture
    from dawnbench_fast.roofline.trace import load_trace

    with tempfile.TemporaryDirectory(prefix="in_step_") as tmp:
        with capture(str(device), Path(tmp) / "trace.json"):
            for i in range(n):
                run(i)
        trace = load_trace(Path(tmp) / "trace.json")
    return group_times(trace, n) if trace.kernels else None


def time_arm(cfg: Config, arm: Arm, data, device: torch.device, replays: int, profile_replays: int) -> dict:
    """One arm on ``data`` (the placed DeviceData): warm-up and capture
    through the trainer's path, then each variant's replays timed; the
    arm's record (see the module's doc)."""
    from dawnbench_fast.runner.runs import warm_up_config
    from dawnbench_fast.training.train import warm_up

    backend = arm_backend(arm, device)
    torch._dynamo.reset()  # an arm's compiled graphs are its own, in one process too
    state = TrainState()
    make = lambda c: CifarTask(c, data, device, backend, state)  # noqa: E731
    t0 = time.perf_counter()
    warm_up(make(warm_up_config(cfg)))
    warmup_s = time.perf_counter() - t0
    task = make(cfg)
    task.init_model()
    if state.graphs is None:
        why = "; ".join(task.plan.eager_why)
        raise ValueError(f"the step does not run with static inputs here ({why}): the in-step benchmark "
                         "times the static step (capture auto on CUDA, static on the CPU)")
    runners = [VariantRunner(task, v) for v in task.plan.variants]
    first_loss = float(runners[0](0))  # the seed's initial weights: comparable across arms
    counts = list(task.plan.variants.values())
    variants, profiles = {}, []
    for run, n_steps in zip(runners, counts, strict=True):
        ms, block = timed_replays(run, replays, device)
        variants[run.variant.name()] = {"steps": n_steps, **quantiles(ms), "block_ms_per_replay": block}
        prof = profile_variant(run, profile_replays, device) if profile_replays else None
        if prof is not None:
            profiles.append((n_steps, prof))
    last_loss = float(runners[-1].last)
    weights = [c / sum(counts) for c in counts]
    step = {k: sum(w * v[k] for w, v in zip(weights, variants.values(), strict=True))
            for k in ("median", "p10", "p90", "mean")}
    return {"arm": arm.name, "status": "ok", "backend": str(backend),
            "ops": {op: row["backend"] for op, row in dispatch.op_table(backend, list(STEP_OPS)).items()},
            "step_ms": step, "run_train_ms": sum(c * v["median"] for c, v in zip(counts, variants.values(),
                                                                                 strict=True)),
            "variants": variants, "first_loss": first_loss, "last_loss": last_loss,
            "warmup_s": warmup_s, "capture_s": state.graphs.capture_seconds,
            "captured": task.plan.captured, "timer": "cuda events" if device.type == "cuda" else "host clock",
            "kernel_time": weighted(profiles) if profiles else None,
            "kernel_time_why": None if profiles else (
                "not profiled (profile_replays 0)" if not profile_replays else
                f"the profiler's trace holds no device activity on {device.type}")}


# -- Arms in turn, under a budget, each written out as it ends ----------------


@dataclass(frozen=True)
class Settings:
    """What every arm of one command shares (plain data: it crosses to an
    arm's own process as JSON)."""

    recipe: str = "dawnbench_fast"
    sets: tuple[str, ...] = ()
    dry_run: bool = False
    device: str = "auto"
    replays: int = 200
    profile_replays: int = 5


def prepared(settings: Settings) -> tuple[Config, torch.device, object]:
    """The trainer's process set-up for ``settings`` (cli.start_run: threads,
    device, cuDNN autotuning, the concrete precision; the conv method
    policy), and the data placed on the device: (config, device, DeviceData)."""
    from dawnbench_fast.cifar.cli import load_data, set_wgrad_policy
    from dawnbench_fast.runner import cli

    cfg = build_config(settings.recipe, list(settings.sets), settings.dry_run)
    cfg, device, w = cli.start_run(dataclasses.replace(cfg, device=settings.device))
    set_wgrad_policy(cfg)
    return cfg, device, load_data(cfg, device, w).device_data


def arm_here(settings: Settings, arm: Arm, ready: tuple | None = None) -> dict:
    """One arm in this process (``ready``: :func:`prepared`'s, reused);
    an arm that cannot run or fails is a record saying why, never an exception."""
    try:
        cfg, device, data = ready if ready is not None else prepared(settings)
        return time_arm(cfg, arm, data, device, settings.replays, settings.profile_replays)
    except dispatch.KernelsUnavailable as e:
        return {"arm": arm.name, "status": "unavailable", "reason": str(e)}
    except Exception as e:  # noqa: BLE001 - the next arm still runs; the record keeps the error
        return {"arm": arm.name, "status": "error", "reason": f"{type(e).__name__}: {e}"}


def arm_in_process(settings: Settings, arm: Arm, timeout_s: float) -> dict:
    """One arm in a Python process of its own (``python -m
    dawnbench_fast.cifar.step_timing --one-arm``), ended at ``timeout_s``."""
    with tempfile.TemporaryDirectory(prefix="in_step_arm_") as tmp:
        spec, out = Path(tmp) / "spec.json", Path(tmp) / "arm.json"
        spec.write_text(json.dumps({"settings": dataclasses.asdict(settings), "arm": arm.name}))
        cmd = [sys.executable, "-m", "dawnbench_fast.cifar.step_timing", "--one-arm", str(spec), str(out)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, timeout_s))
        except subprocess.TimeoutExpired:
            return {"arm": arm.name, "status": "stopped at the budget",
                    "reason": f"its process was ended after {timeout_s:.0f} s, the budget left"}
        if out.exists():
            return json.loads(out.read_text())
        tail = (r.stderr or r.stdout).strip().splitlines()[-5:]
        return {"arm": arm.name, "status": "error",
                "reason": f"its process exited {r.returncode}: " + " | ".join(tail)}


def header(settings: Settings, arms: list[Arm], budget_s: float, isolate: bool) -> dict:
    from dawnbench_fast.reporting import bench

    device = torch.device("cuda" if settings.device == "auto" and torch.cuda.is_available()
                          else "cpu" if settings.device == "auto" else settings.device)
    return {"schema_version": SCHEMA_VERSION, "kind": "in-step",
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "environment": bench.environment(device, "dawnbench_fast.cifar.step_timing"),
            "settings": {**dataclasses.asdict(settings), "sets": list(settings.sets)}, "budget_s": budget_s,
            "isolated": isolate, "planned": [a.name for a in arms], "arms": [], "stopped": None}


def time_in_step(cfg_overrides: list[str], arms: list[str], replays: int = 200, budget_s: float = 240.0,
                 device: str = "auto", *, recipe: str = "dawnbench_fast", dry_run: bool = False,
                 profile_replays: int = 5, isolate: str = "auto", out: Path | None = None) -> dict:
    """Time ``arms`` in turn (see the module's doc) and return the result,
    rewritten to ``out`` after every arm. ``isolate``: ``process`` (each arm
    in a process of its own), ``none`` (all in this one), ``auto`` (process
    on CUDA). No arm starts that the mean arm so far says would end past
    ``budget_s``; a running arm's process is ended at it."""
    settings = Settings(recipe, tuple(cfg_overrides), dry_run, device, replays, profile_replays)
    build_config(recipe, list(cfg_overrides), dry_run)  # a bad --set is one line now, not per arm
    parsed = [parse_arm(a) for a in arms]
    on_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    apart = isolate == "process" or (isolate == "auto" and on_cuda)
    # the process set-up before the header: bench.environment imports numba, after which
    # numba.set_num_threads (runtime.set_threads) put torch's threads back to all cores
    ready = None if apart else prepared(settings)
    result = header(settings, parsed, budget_s, apart)
    t0, took = time.perf_counter(), []
    for arm in parsed:
        left = budget_s - (time.perf_counter() - t0)
        mean = statistics.fmean(took) if took else 0.0
        if left <= 0 or mean > left:
            result["stopped"] = "budget"
            result["arms"].append({"arm": arm.name, "status": "skipped", "reason": f"{left:.0f} s of the "
                                   f"{budget_s:.0f} s budget left; an arm so far took {mean:.0f} s"})
        else:
            t = time.perf_counter()
            rec = arm_in_process(settings, arm, left) if apart else arm_here(settings, arm, ready)
            took.append(time.perf_counter() - t)
            result["arms"].append({**rec, "wall_s": took[-1]})
        if out is not None:
            atomic.write_json(Path(out), result)
    return result


def summary(result: dict) -> str:
    """The result as a few console lines: each arm's step and its ratio to torch's."""
    base = next((a["step_ms"]["median"] for a in result["arms"] if a["arm"] == "torch"
                 and a["status"] == "ok"), None)
    lines = []
    for a in result["arms"]:
        if a["status"] != "ok":
            lines.append(f"{a['arm']:>24}: {a['status']} ({a.get('reason', '')})")
            continue
        s = a["step_ms"]
        ratio = f", {s['median'] / base:.3f}x torch's" if base else ""
        lines.append(f"{a['arm']:>24}: step {s['median']:.3f} ms (p10 {s['p10']:.3f}, p90 {s['p90']:.3f})"
                     f"{ratio}; warm-up {a['warmup_s']:.1f} s")
    return "\n".join(lines) + "\n"


# -- The command line (benchmarks/bench_in_step.py) -----------------------------


def build_parser():
    import argparse

    p = argparse.ArgumentParser(
        prog="python benchmarks/bench_in_step.py",
        description="Time the captured CIFAR training step with --kernels torch, auto and each of our "
        "faces switched in one op at a time (arms); write the result JSON after every arm.")
    p.add_argument("--device", default="auto", help="auto, cuda, cuda:N or cpu")
    p.add_argument("--arms", default="", help="comma-separated: torch, auto, a backend, or op=face "
                   "(bn_act=triton; several ops joined by +); default: torch, auto, then every face "
                   "of the step's ops that can run here, one op at a time")
    p.add_argument("--replays", type=int, default=200, help="timed replays of each variant of the step")
    p.add_argument("--profile-replays", type=int, default=5,
                   help="replays of each variant under torch.profiler for the kernel time by group (0: none)")
    p.add_argument("--budget-s", type=float, default=240.0, help="start no arm that would end past this")
    p.add_argument("--recipe", default="dawnbench_fast", help="the named recipe (cifar.recipe.RECIPES)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="recipe field override")
    p.add_argument("--data-dir", help="CIFAR-10 folder (default: $DAWNBENCH_DATA, then the cache)")
    p.add_argument("--isolate", choices=("auto", "process", "none"), default="auto",
                   help="each arm in a process of its own (auto: on CUDA)")
    p.add_argument("--dry-run", action="store_true", help="tiny shapes, capture=static: the CPU check")
    p.add_argument("--out", required=True, help="the result JSON, rewritten after every arm")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--one-arm"]:  # an arm's own process (arm_in_process)
        spec = json.loads(Path(argv[1]).read_text())
        settings = Settings(**{**spec["settings"], "sets": tuple(spec["settings"]["sets"])})
        atomic.write_json(Path(argv[2]), arm_here(settings, parse_arm(spec["arm"])))
        return 0
    a = build_parser().parse_args(argv)
    sets = [*([f"data_dir={a.data_dir}"] if a.data_dir else []), *a.set]
    try:
        device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available() else
                              "cpu" if a.device == "auto" else a.device)
        arms = [s for s in a.arms.split(",") if s] or default_arms(device)
        result = time_in_step(sets, arms, a.replays, a.budget_s, a.device, recipe=a.recipe,
                              dry_run=a.dry_run, profile_replays=a.profile_replays, isolate=a.isolate,
                              out=Path(a.out))
    except (ValueError, RuntimeError) as e:
        print(f"bench_in_step: {e}", file=sys.stderr)
        return 2
    print(summary(result), end="")
    print(f"written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
