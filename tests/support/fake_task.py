"""A fake recipe for the loop's tests: a config and task with no data and no
model, whose every call moves a fake timer by a known amount, so the tests can
tell exactly what the clock charged."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from dawnbench_fast.training.task import Deployed, Evaluation, Splits, StepLoss, epoch_steps


class FakeTimer:
    """A clock that only the fake task moves: ``advance(s)`` is s seconds of work."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# Seconds of (fake) work, chosen as distinct powers of two so that every sum
# below is exact in floating point and tells which parts were charged.
INIT_S, STEP_S, EVAL_S, TTA_EVAL_S, SHOW_S = 1.0, 2.0, 0.25, 0.5, 64.0
# The test labels the fake predictor holds: its one-image predictions (class 0) are 60% right.
LATENCY_LABELS = (0, 1, 0, 2, 0)


@dataclass
class FakeConfig:
    epochs: float = 4
    eval_every: int = 1
    show_every: int = 0
    target: float = 0.5
    log_eval_tta: bool = False
    seed: int = 7
    accuracies: tuple[float, ...] = (0.1, 0.6, 0.4, 0.7)  # one per charged evaluation, in order
    steps_per_epoch: int = 3
    batch: int = 4
    log: list = field(default_factory=list)
    timer: FakeTimer = field(default_factory=FakeTimer)

    def build_task(self, device: torch.device) -> FakeTask:
        return FakeTask(self, device)


class FakeTask:
    """Epoch e, step i: a batch of ``batch`` examples whose summed loss is
    100 e + i; charged evaluations return the config's accuracies in turn.
    Every call moves the fake timer by its cost above."""

    def __init__(self, cfg: FakeConfig, device: torch.device):
        self.cfg, self.device = cfg, device
        self.epoch_steps = epoch_steps(cfg.epochs, lambda e: cfg.steps_per_epoch)
        self.total_steps = sum(self.epoch_steps)
        self.splits = Splits(enabled=False)
        self.host_read_every = 1
        self.evals = 0
        self.warm_up_epochs = (0,)

    def init_model(self) -> None:
        self.cfg.log.append("init")
        self.cfg.timer.advance(INIT_S)

    def prepare_warm_up(self) -> None:
        pass

    def capture_steps(self) -> None:
        pass

    def warm_up_evaluation(self) -> None:
        self.evaluate(tta=True, max_batches=1)

    def epoch_batches(self, epoch: int):
        for i in range(self.cfg.steps_per_epoch):
            yield epoch, i

    def train_step(self, epoch: int, i: int) -> StepLoss:
        self.cfg.log.append(("step", epoch, i))
        self.cfg.timer.advance(STEP_S)
        return StepLoss(torch.tensor(float(100 * epoch + i)), self.cfg.batch)

    def evaluate(self, tta: bool, max_batches: int | None = None) -> Evaluation:
        self.cfg.log.append(("eval", tta, max_batches))
        if max_batches is None and not tta and self.cfg.show_every and self._showing():
            self.cfg.timer.advance(SHOW_S)
            return Evaluation(0.99, None, False, "display")  # would reach any target: must not count
        self.cfg.timer.advance(TTA_EVAL_S if tta else EVAL_S)
        acc = self.cfg.accuracies[self.evals % len(self.cfg.accuracies)]
        self.evals += 1
        return Evaluation(acc, None, tta, f"tta {int(tta)}")

    def _showing(self) -> bool:
        """Display-only evaluations are the ones at epochs that are not charged."""
        epoch = sum(1 for e in self.cfg.log if isinstance(e, tuple) and e[0] == "step") // \
            self.cfg.steps_per_epoch
        return not (epoch == self.cfg.epochs or (self.cfg.eval_every and epoch % self.cfg.eval_every == 0))

    @contextmanager
    def predictor(self, tta: bool):
        """Every image's logits are equal, so each prediction is class 0:
        the labels make 3 of the 5 right (60%)."""
        with torch.no_grad():
            yield Deployed(lambda x: x.sum(dim=(2, 3)), torch.ones(5, 3, 2, 2),
                           torch.tensor(LATENCY_LABELS), len(LATENCY_LABELS))
