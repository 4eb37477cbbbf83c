"""The in-step benchmark's arms and one arm's timing (the
benchmark itself, its budget and command line: tools/step_timing.py).

An *arm* is a kernel choice: ``torch``, ``auto`` or another whole backend,
or ``op=face`` (``bn_act=triton``; several joined by ``+``), which runs
that op on that face and every other op on torch's, through the same
:class:`~dawnbench_fast.dispatch.PerOpBackend` that ``--kernels auto`` on a
GPU hands the task. :func:`time_arm` builds the recipe's task on a
:class:`~dawnbench_fast.cifar.step.TrainState` of its own, warms it
up and captures its graphs through the trainer's path (train.warm_up on a
throwaway task of the warm-up's seed sharing the state, as runner/runs.py
does), then, on the timed task after its seed's init, replays each variant
of the step (cifar.step: side, whitening bias) ``replays`` times on
the first epoch at its side, each replay timed with CUDA events (the host's
clock on the CPU, where the static step's body runs eagerly:
``capture=static``), and a few more under torch.profiler for the kernel
time by group (tools/step_kernels.py; none on the CPU, whose trace holds no
device activity). The arm's step time is the run's: each variant's median,
p10 and p90 weighted by the share of the run's steps that replay it.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dawnbench_fast import dispatch
from dawnbench_fast.cifar.step import StepKey, StepVariant
from dawnbench_fast.cifar.task import CifarTask, Config, shared_tasks
from tools.step_kernels import group_times, weighted

STEP_OPS = ("bn_act", "augment", "conv_group", "linear", "newton_schulz")
GPU_FACES = ("triton", "cuda")


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
        self.epoch = task.first_epoch_at(variant.side)
        self.rows = task.epoch_rows(self.epoch)

    def __call__(self, i: int) -> torch.Tensor:
        k = i % len(self.rows)
        key = StepKey(self.rows[k], self.epoch, k, self.task.cfg.seed, self.variant.side)
        self.last = self.task.state.stepper(key, self.variant)
        return self.last


def profile_variant(run: VariantRunner, n: int, device: torch.device) -> dict | None:
    """``n`` replays under torch.profiler: the kernel time by group
    (tools/step_kernels.py), or None where the trace holds no device activity."""
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
    from dawnbench_fast.runner.runs import warm_up_run

    backend = arm_backend(arm, device)
    torch._dynamo.reset()  # an arm's compiled graphs are its own, in one process too
    make = shared_tasks(data, device, backend)
    task = make(cfg)  # as a seed does: the run's task (and its state) before the warm-up's
    t0 = time.perf_counter()
    warm_up_run(make, cfg)
    warmup_s = time.perf_counter() - t0
    task.init_model()
    stepper = task.state.stepper
    if stepper.static is None:
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
            "warmup_s": warmup_s, "capture_s": stepper.capture_seconds,
            "captured": bool(stepper.graphs), "step": stepper.record(),
            "timer": "cuda events" if device.type == "cuda" else "host clock",
            "kernel_time": weighted(profiles) if profiles else None,
            "kernel_time_why": None if profiles else (
                "not profiled (profile_replays 0)" if not profile_replays else
                f"the profiler's trace holds no device activity on {device.type}")}
