"""One training loop for every recipe: epochs, evaluation, and the
time-to-accuracy clock as DAWNBench defines it.

The clock (:data:`CLOCK_PHASES`) runs from the start of training, with the data
already in memory, and includes model init (e.g. whitening), every training
step and every *charged* evaluation: each one whose result is compared with
the target or written to the TSV. By default that is the final evaluation
only; ``eval_every`` adds charged evaluations, and the TSV's hours column is
then the running clock, so its first row that reaches the target is the time
to accuracy. Evaluations for display only (``show_every``) are neither
checked nor written, and their time is its own phase, outside the clock. Data
loading and the warm-up are timed as their own phases too, never hidden. On
CUDA every reading synchronises the device.

A recipe plugs in as a :class:`Task` (build the model, yield an epoch's
batches, take one step, evaluate with or without its test-time augmentation);
its config is a :class:`LoopConfig` that knows how to build its task, which is
how :func:`loss_trajectory` runs any recipe without importing it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import nvtx
import torch

from dawnbench_fast.execution.distributed import world
from dawnbench_fast.execution.runtime import synchronizes
from dawnbench_fast.training.task import Evaluation, LoopConfig, Predict, StepLoss, Task, loop_epochs

NVTX_DOMAIN = "dawnbench"


# The phases that make up the time-to-accuracy clock; every other phase
# (data_load, warmup, display_eval, inference_eval, latency) is reported apart.
CLOCK_PHASES = ("init", "train", "eval")


class Phases:
    """Wall-clock seconds per named phase (data_load, warmup, init, train,
    eval, display_eval, latency, ...), the device's work included.

    On CUDA (unless a ``timer`` is given) a phase is timed as the published
    GPU records time theirs: a CUDA event recorded on the device's stream at
    its start and one at its end, read after waiting for the end event. The
    start event runs after the work queued before it, so no earlier work is
    charged to the phase and the host never waits at a phase's start; the one
    wait is at its end, never inside it (no synchronisation per step). On the
    CPU, or with ``timer`` (tests drive the clock with it), the host's timer,
    with the device synchronised at both ends."""

    def __init__(self, device: torch.device, timer: Callable[[], float] | None = None,
                 energy: Callable[[], float] | None = None):
        """``energy``: a reading of the GPU's energy counter in joules
        (dawnbench_fast.hardware.gpu_info.energy_reader), for the joules of each phase."""
        self.device = device
        self.events = timer is None and synchronizes(device)
        self.timer = timer or time.perf_counter
        self.energy = energy
        self.seconds: dict[str, float] = {}
        self.joules: dict[str, float] = {}

    @contextmanager
    def timed(self, name: str):
        """Time a phase; it is also an nvtx range, so Nsight timelines name it."""
        joules = self.energy() if self.energy is not None else 0.0  # outside the timed span
        stop = self._start()
        try:
            with nvtx.annotate(name, domain=NVTX_DOMAIN):
                yield
        finally:
            self.add(name, stop())
            if self.energy is not None:  # read after the phase's work has finished (stop waited)
                self.joules[name] = self.joules.get(name, 0.0) + self.energy() - joules

    def _start(self) -> Callable[[], float]:
        """Start a reading; the returned function ends it and gives the seconds."""
        if self.events:
            stream = torch.cuda.current_stream(self.device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)

            def stop_events() -> float:
                end.record(stream)
                end.synchronize()
                return start.elapsed_time(end) / 1000.0  # ms -> s

            return stop_events
        self._sync()
        t0 = self.timer()

        def stop_host() -> float:
            self._sync()
            return self.timer() - t0

        return stop_host

    def _sync(self) -> None:
        if synchronizes(self.device):
            torch.cuda.synchronize(self.device)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    @property
    def clock(self) -> float:
        """The time-to-accuracy clock so far: init + training + charged evaluations."""
        return sum(self.seconds.get(k, 0.0) for k in CLOCK_PHASES)

    @property
    def clock_joules(self) -> float | None:
        """The GPU's energy over the clock's phases so far (None without a reading)."""
        return None if self.energy is None else sum(self.joules.get(k, 0.0) for k in CLOCK_PHASES)


@dataclass
class EpochRow:
    """One charged evaluation: a row of the DAWNBench TSV."""

    epoch: int  # 1-based, as in DAWNBench TSVs
    clock_seconds: float  # the running clock at the end of this evaluation
    eval_seconds: float  # this evaluation's share of it
    top1: float
    top5: float | None
    tta: bool

    @property
    def hours(self) -> float:
        """DAWNBench 'hours' column: the running clock, in hours."""
        return self.clock_seconds / 3600.0


@dataclass
class LoopResult:
    rows: list[EpochRow] = field(default_factory=list)
    time_to_target_seconds: float | None = None  # the clock when the target was reached; None if never
    time_to_target_epoch: int | None = None
    epochs_done: int = 0  # epochs trained so far (where a resumed run goes on)
    # each epoch's mean training loss per example (None where the epoch did not say)
    train_losses: list[float | None] = field(default_factory=list)

    def to_dict(self) -> dict:
        """Plain data for a checkpoint (its keys are the checkpoint format's: unchanged,
        so that checkpoints written before the attributes' renaming still resume)."""
        return {"rows": [dataclasses.asdict(r) for r in self.rows],
                "tta_seconds": self.time_to_target_seconds, "tta_epoch": self.time_to_target_epoch,
                "epochs_done": self.epochs_done,
                "train_losses": list(self.train_losses)}

    @classmethod
    def from_dict(cls, d: dict) -> LoopResult:
        # checkpoints written before train_losses existed: unknown for the epochs they hold
        losses = d.get("train_losses", [None] * d["epochs_done"])
        return cls([EpochRow(**r) for r in d["rows"]], d["tta_seconds"], d["tta_epoch"], d["epochs_done"],
                   losses)

    @property
    def final(self) -> EpochRow:
        return self.rows[-1]


def _due(epoch: int, every: int) -> bool:
    """Whether the 0-based ``epoch`` ends an ``every``-epoch period (0: never)."""
    return every > 0 and (epoch + 1) % every == 0


def run_epochs(
    *,
    epochs: int,
    init: Callable[[], None],
    train_epoch: Callable[[int], float | None],
    evaluate: Callable[[int, bool], tuple[float, float | None, bool]],
    eval_every: int,
    target: float,
    phases: Phases,
    target_metric: str = "top1",
    show: Callable[[int], None] | None = None,
    show_every: int = 0,
    on_row: Callable[[EpochRow], None] | None = None,
    on_epoch_end: Callable[[LoopResult], None] | None = None,
    resume: LoopResult | None = None,
) -> LoopResult:
    """Run ``init`` then ``epochs`` epochs under the time-to-accuracy clock.
    ``train_epoch(epoch)`` may return the epoch's mean training loss
    (``LoopResult.train_losses``).

    ``evaluate(epoch, final)`` returns (top1, top5, used_tta); it is charged
    to the clock (phase ``eval``), its row is written and checked against
    ``target``. It runs after the last epoch and every ``eval_every`` epochs
    (0: the last only). ``show(epoch)``, every ``show_every`` epochs where no
    charged evaluation runs, is for display: phase ``display_eval``, outside
    the clock, never checked or written. ``on_row(row)`` sees each row once
    its evaluation is on the clock (to print it). ``on_epoch_end(result)``
    runs after each epoch and its evaluation (to checkpoint). ``resume``: the
    result of a run stopped after ``resume.epochs_done`` epochs, whose state
    the caller has restored (model, optimisers, the clock's phases): ``init``
    is skipped and the loop goes on from the next epoch.
    """
    res = resume if resume is not None else LoopResult()
    if resume is None:
        with phases.timed("init"):
            init()
    for epoch in range(res.epochs_done, epochs):
        with phases.timed("train"):
            res.train_losses.append(train_epoch(epoch))
        if epoch == epochs - 1 or _due(epoch, eval_every):
            before = phases.seconds.get("eval", 0.0)
            with phases.timed("eval"):
                top1, top5, used_tta = evaluate(epoch, epoch == epochs - 1)
            row = EpochRow(epoch + 1, phases.clock, phases.seconds["eval"] - before, top1, top5, used_tta)
            res.rows.append(row)
            if on_row is not None:
                on_row(row)
            metric = top1 if target_metric == "top1" else (top5 or 0.0)
            if res.time_to_target_seconds is None and metric >= target:
                res.time_to_target_seconds, res.time_to_target_epoch = row.clock_seconds, row.epoch
        elif show is not None and _due(epoch, show_every):
            with phases.timed("display_eval"):
                show(epoch)
        res.epochs_done = epoch + 1
        if on_epoch_end is not None:
            on_epoch_end(res)
    return res


# ---------------------------------------------------------------------------
# Driving a task
# ---------------------------------------------------------------------------


def batches_forever(task: Task) -> Iterator[tuple[Any, ...]]:
    """The task's batches, epoch after epoch, for step-counted runs (profiles,
    loss trajectories). Lazy: a batch is made when it is asked for."""
    epoch = 0
    while True:
        yield from task.epoch_batches(epoch)
        epoch += 1


class NonFiniteLoss(RuntimeError):
    """The training loss became nan or inf: the run diverged (one line, for the CLI)."""


def train_epoch(task: Task, epoch: int, progress: Any = None) -> float | None:
    """Every step of one epoch; each an nvtx range so Nsight names it. Returns
    the epoch's mean training loss per example (None if it had no step),
    over every rank's examples in a torchrun job (dawnbench_fast.execution.distributed).

    A nan or inf loss stops the run with the step number. The check reads the
    loss on the host every step on the CPU, where that is free; on a GPU a
    device-side record of the first bad step is read every
    ``task.host_read_every`` steps (execution.runtime.host_read_every), never
    a per-step synchronisation (the progress bar's loss is read at those
    steps only, for the same reason)."""
    every = task.host_read_every
    first_step = sum(task.epoch_steps[:epoch])
    first_bad = torch.full((), -1, dtype=torch.int64, device=task.device)
    step = first_step
    # summed on the device and read once, with the divergence record: no sync per step
    loss_sum, examples = torch.zeros((), device=task.device), 0
    # a fractional last epoch stops part-way (its later batches are never made)
    batches = islice(task.epoch_batches(epoch), task.epoch_steps[epoch])
    for step, batch in enumerate(batches, start=first_step):
        with nvtx.annotate("train_step", domain=NVTX_DOMAIN):
            loss = task.train_step(*batch)
        bad = ~torch.isfinite(loss.total)
        first_bad = torch.where(bad & (first_bad < 0), torch.full_like(first_bad, step), first_bad)
        loss_sum += loss.total.detach().float()
        examples += loss.examples
        if (step + 1) % every == 0:
            _raise_if_diverged(first_bad, loss)
            # the loss shown is read where the check has just synchronised anyway
            if progress is not None:
                progress.set_postfix(epoch=epoch + 1, loss=f"{loss.per_example():.3f}")
        if progress is not None:
            progress.update(1)
    _raise_if_diverged(first_bad, None)
    w = world()
    if w.distributed:  # one all-reduce per epoch: the mean over the global batches
        loss_sum, (examples,) = w.sum_float(loss_sum), w.sum_counts([examples])
    return loss_sum.item() / examples if examples else None


def _raise_if_diverged(first_bad: torch.Tensor, loss: StepLoss | None) -> None:
    step = int(first_bad.item())
    if step >= 0:
        value = "" if loss is None else f" ({loss.per_example():g} per example at the last step)"
        raise NonFiniteLoss(
            f"step {step + 1}: the training loss is not finite{value}: the run diverged; lower the "
            "learning rates (CIFAR: e.g. --set lr_filters=0.12 --set lr_head=0.3; ImageNet: --set "
            "lr_per_256=...) or use --set precision=fp32")


def warm_up(task: Task) -> None:
    """A throwaway task (a seed of its own) runs two steps of each of its
    ``warm_up_epochs`` (one per shape its steps take), records what its run
    replays (``capture_steps``) and runs its ``warm_up_evaluation``, so that
    one-off costs (kernel selection, JIT compilation, graph capture,
    allocator growth) stay out of the clock; ``prepare_warm_up`` first (the
    Task protocol says what each is for). Its weights are discarded: the
    run's own ``init_model`` starts afresh from its seed (the state it
    shares is reset in place, its graphs kept)."""
    task.init_model()
    task.prepare_warm_up()
    for epoch in task.warm_up_epochs:
        for k, batch in enumerate(task.epoch_batches(epoch)):
            task.train_step(*batch)
            if k == 1:
                break
    task.capture_steps()  # after the steps that compiled and autotuned each shape
    task.warm_up_evaluation()


def eval_line(seed: int, epoch: int, epochs: int, ev: Evaluation, clock: float,
              charged: bool = True) -> str:
    """The log line of one evaluation (the console format users and scripts read)."""
    top5 = "" if ev.top5 is None else f", top-5 {100 * ev.top5:.2f}%"
    where = f"clock {clock:.1f} s" if charged else f"display only, outside the clock at {clock:.1f} s"
    return (f"seed {seed} epoch {epoch + 1}/{epochs}: test top-1 {100 * ev.top1:.2f}%{top5} "
            f"({ev.note}), {where}")


def train(task: Task, phases: Phases, *, warm_up_task: Callable[[], Task] | None = None,
          progress: bool = True, target_metric: str = "top1",
          on_epoch_end: Callable[[LoopResult], None] | None = None,
          resume: LoopResult | None = None) -> LoopResult:
    """Warm up on a throwaway task (timed as ``warmup``, outside the clock),
    then run ``task`` under the clock: the final evaluation with TTA, the
    intermediate charged ones with it only if ``cfg.log_eval_tta``, the
    display-only ones (``cfg.show_every``) with one view. ``on_epoch_end`` and
    ``resume`` are :func:`run_epochs`' (checkpoints)."""
    if warm_up_task is not None:
        with phases.timed("warmup"):
            warm_up(warm_up_task())
    cfg = task.cfg
    epochs = loop_epochs(cfg.epochs)
    bar = None
    if progress:
        from tqdm import tqdm

        done = 0 if resume is None else sum(task.epoch_steps[:resume.epochs_done])
        bar = tqdm(total=task.total_steps, initial=done, desc=f"seed {cfg.seed}", unit="step", leave=False)
    write = bar.write if bar is not None else (lambda line: print(line, flush=True))

    evaluations: dict[int, Evaluation] = {}

    def charged(epoch: int, final: bool) -> tuple[float, float | None, bool]:
        ev = evaluations[epoch] = task.evaluate(tta=final or cfg.log_eval_tta)
        return ev.top1, ev.top5, ev.tta

    def on_row(row: EpochRow) -> None:  # after the eval phase closed: the clock includes it
        write(eval_line(cfg.seed, row.epoch - 1, epochs, evaluations.pop(row.epoch - 1),
                        row.clock_seconds))

    def show(epoch: int) -> None:
        ev = task.evaluate(tta=False)
        write(eval_line(cfg.seed, epoch, epochs, ev, phases.clock, charged=False))

    result = run_epochs(
        epochs=epochs, init=task.init_model, train_epoch=lambda e: train_epoch(task, e, bar),
        evaluate=charged, eval_every=cfg.eval_every, target=cfg.target, phases=phases,
        target_metric=target_metric, show=show, show_every=cfg.show_every, on_row=on_row,
        on_epoch_end=on_epoch_end, resume=resume,
    )
    if bar is not None:
        bar.close()
    return result


def loss_trajectory(config: LoopConfig, steps: int, device: str | torch.device = "cpu") -> list[float]:
    """Per-example training loss of the first ``steps`` steps of a recipe's
    config (no eval, no warm-up): for comparing kernel backends on the same
    seed and data."""
    task = config.build_task(torch.device(device))
    task.init_model()
    return [task.train_step(*batch).per_example() for batch in islice(batches_forever(task), steps)]


# ---------------------------------------------------------------------------
# Measurements on a trained model
# ---------------------------------------------------------------------------


def batched(inputs: torch.Tensor, labels: torch.Tensor,
            batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, labels) batches of an in-memory test set, in order."""
    for i in range(0, len(inputs), batch_size):
        yield inputs[i : i + batch_size], labels[i : i + batch_size]


@torch.no_grad()
def accuracy(predict: Predict,
             batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
             top5: bool = False) -> tuple[float, float | None]:
    """(top-1, top-5 or None) of ``predict``'s logits over (inputs, labels)
    batches; top-5 is top-k with k = the classes where there are fewer than
    5. ``predict`` carries the test-time augmentation, if any. In a torchrun
    job each rank passes its shard of the test set and the counts are summed
    over the ranks (dawnbench_fast.execution.distributed)."""
    hits, total = None, 0  # [top-1, top-5] counts, kept on the device and read once at the end
    for x, y in batches:
        with nvtx.annotate("eval_batch", domain=NVTX_DOMAIN):  # Nsight names each batch
            logits = predict(x)
            hit1 = (logits.argmax(1) == y).sum()
            hit5 = ((logits.topk(min(5, logits.shape[1]), 1).indices == y[:, None]).any(1).sum() if top5
                    else torch.zeros_like(hit1))
            batch_hits = torch.stack([hit1, hit5])
            hits = batch_hits if hits is None else hits + batch_hits
        total += len(y)
    correct, correct5 = (0, 0) if hits is None else hits.tolist()
    correct, correct5, total = world().sum_counts([correct, correct5, total])
    return correct / total, (correct5 / total if top5 else None)
