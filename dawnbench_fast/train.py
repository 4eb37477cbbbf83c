"""One training loop for every recipe: epochs, evaluation, and the
time-to-accuracy clock as DAWNBench defines it.

The clock runs from the start of training (data already in memory) and
includes model init (e.g. whitening), every training step, and the evaluation
that decides the target was reached. Evaluations done only for the log are
timed separately and excluded, as are data loading and warm-up (reported as
their own phases, never hidden). On CUDA every reading synchronises the device.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import nvtx
import torch

NVTX_DOMAIN = "dawnbench"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Phases:
    """Wall-clock seconds per named phase (data_load, warmup, init, train,
    log_eval, decide_eval, latency, ...), device-synchronised."""

    def __init__(self, device: torch.device):
        self.device = device
        self.seconds: dict[str, float] = {}

    @contextmanager
    def timed(self, name: str):
        """Time a phase; it is also an nvtx range, so Nsight timelines name it."""
        _sync(self.device)
        t0 = time.perf_counter()
        try:
            with nvtx.annotate(name, domain=NVTX_DOMAIN):
                yield
        finally:
            _sync(self.device)
            self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds


@dataclass
class EpochRow:
    epoch: int  # 1-based, as in DAWNBench TSVs
    train_seconds: float  # clock at the end of this epoch's training
    eval_seconds: float  # this epoch's evaluation
    top1: float
    top5: float | None
    tta: bool

    @property
    def hours(self) -> float:
        """DAWNBench 'hours' column: training clock plus this evaluation."""
        return (self.train_seconds + self.eval_seconds) / 3600.0


@dataclass
class LoopResult:
    rows: list[EpochRow] = field(default_factory=list)
    tta_seconds: float | None = None  # time to target, None if never reached
    tta_epoch: int | None = None

    @property
    def final(self) -> EpochRow:
        return self.rows[-1]


def run_epochs(
    *,
    epochs: int,
    init: Callable[[], None],
    train_epoch: Callable[[int], None],
    evaluate: Callable[[int, bool], tuple[float, float | None, bool]],
    eval_every: int,
    target: float,
    phases: Phases,
    target_metric: str = "top1",
) -> LoopResult:
    """Run ``init`` then ``epochs`` epochs under the time-to-accuracy clock.

    ``evaluate(epoch, final)`` returns (top1, top5, used_tta). The last epoch
    is always evaluated; others every ``eval_every`` epochs (0: never).
    """
    res = LoopResult()
    with phases.timed("init"):
        init()
    clock = phases.seconds["init"]
    for epoch in range(epochs):
        with phases.timed("train"):
            train_epoch(epoch)
        _sync(phases.device)
        clock = phases.seconds["init"] + phases.seconds["train"]
        final = epoch == epochs - 1
        if not final and (eval_every <= 0 or (epoch + 1) % eval_every):
            continue
        t0 = time.perf_counter()
        top1, top5, used_tta = evaluate(epoch, final)
        _sync(phases.device)
        eval_s = time.perf_counter() - t0
        row = EpochRow(epoch + 1, clock, eval_s, top1, top5, used_tta)
        res.rows.append(row)
        metric = top1 if target_metric == "top1" else (top5 or 0.0)
        if res.tta_seconds is None and metric >= target:
            res.tta_seconds, res.tta_epoch = clock + eval_s, epoch + 1
            phases.add("decide_eval", eval_s)
        else:
            phases.add("log_eval", eval_s)
    return res


def loss_trajectory(config, steps: int, device: str | torch.device = "cpu") -> list[float]:
    """Per-example losses of the first ``steps`` training steps of a recipe's
    config (the CIFAR recipe today), for comparing kernel backends."""
    from dawnbench_fast.cifar import loss_trajectory as cifar_losses

    return cifar_losses(config, steps, device)


class Splits:
    """Seconds per part of a training step (augment, forward, backward,
    optimizer), summed over a run. Only on the CPU, where reading the clock is
    free; on CUDA it would need a device sync that slows the step, so it is off."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.seconds: dict[str, float] = {}
        self._t = 0.0

    def start(self) -> None:
        if self.enabled:
            self._t = time.perf_counter()

    def mark(self, name: str) -> None:
        if self.enabled:
            now = time.perf_counter()
            self.seconds[name] = self.seconds.get(name, 0.0) + now - self._t
            self._t = now
