"""The task-agnostic loop (dawnbench_fast.train) driven by a fake task: which
epochs it evaluates, with or without TTA, when the clock stops, what each
phase holds, and that loss_trajectory needs nothing but a config that builds
its task. No dataset, no real model: well under a second."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
import torch

from dawnbench_fast import train
from dawnbench_fast.train import Evaluation, Phases, Splits, StepLoss


@dataclass
class FakeConfig:
    epochs: int = 4
    eval_every: int = 1
    target: float = 0.5
    log_eval_tta: bool = False
    seed: int = 7
    accuracies: tuple[float, ...] = (0.1, 0.6, 0.4, 0.7)  # one per evaluation, in order
    steps_per_epoch: int = 3
    batch: int = 4
    log: list = field(default_factory=list)

    def build_task(self, device: torch.device) -> FakeTask:
        return FakeTask(self, device)


class FakeTask:
    """Epoch e, step i: a batch of ``batch`` examples whose summed loss is
    100 e + i; evaluations return the config's accuracies in turn."""

    def __init__(self, cfg: FakeConfig, device: torch.device):
        self.cfg, self.device = cfg, device
        self.total_steps = cfg.epochs * cfg.steps_per_epoch
        self.splits = Splits(enabled=False)
        self.evals = 0

    def init_model(self) -> None:
        self.cfg.log.append("init")

    def epoch_batches(self, epoch: int):
        for i in range(self.cfg.steps_per_epoch):
            yield epoch, i

    def train_step(self, epoch: int, i: int) -> StepLoss:
        self.cfg.log.append(("step", epoch, i))
        return StepLoss(torch.tensor(float(100 * epoch + i)), self.cfg.batch)

    def evaluate(self, tta: bool, max_batches: int | None = None) -> Evaluation:
        self.cfg.log.append(("eval", tta, max_batches))
        acc = self.cfg.accuracies[self.evals % len(self.cfg.accuracies)]
        self.evals += 1
        return Evaluation(acc, None, tta, f"tta {int(tta)}")

    @contextmanager
    def predictor(self, tta: bool):
        with torch.no_grad():
            yield (lambda x: x.sum(dim=(2, 3))), torch.ones(5, 3, 2, 2)


def run(cfg: FakeConfig, **kw) -> tuple[train.LoopResult, Phases]:
    phases = Phases(torch.device("cpu"))
    task = cfg.build_task(torch.device("cpu"))
    return train.train(task, phases, progress=False, **kw), phases


def test_every_epoch_evaluated_final_with_tta_and_clock_stops_at_first_target(capsys):
    cfg = FakeConfig()
    res, phases = run(cfg)
    assert [r.epoch for r in res.rows] == [1, 2, 3, 4]
    assert [r.tta for r in res.rows] == [False, False, False, True]
    assert [e for e in cfg.log if e[0] == "eval"] == [("eval", False, None)] * 3 + [("eval", True, None)]
    # 0.6 at epoch 2 is the first to reach 0.5; the later 0.7 does not move the clock
    assert res.tta_epoch == 2
    assert res.tta_seconds == pytest.approx(res.rows[1].train_seconds + res.rows[1].eval_seconds)
    assert res.final.top1 == 0.7
    assert set(phases.seconds) == {"init", "train", "log_eval", "decide_eval"}
    assert phases.seconds["decide_eval"] == pytest.approx(res.rows[1].eval_seconds)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("seed 7 epoch 1/4: test top-1 10.00% (tta 0), train clock ")
    assert out[3].startswith("seed 7 epoch 4/4: test top-1 70.00% (tta 1), train clock ")


def test_eval_every_and_log_tta_and_a_target_never_reached():
    cfg = FakeConfig(eval_every=3, log_eval_tta=True, accuracies=(0.2, 0.3), epochs=5)
    res, _ = run(cfg)
    assert [r.epoch for r in res.rows] == [3, 5]  # every 3rd, and always the last
    assert all(r.tta for r in res.rows)
    assert res.tta_seconds is None and res.tta_epoch is None
    steps = [e for e in cfg.log if e[0] == "step"]
    assert steps == [("step", ep, i) for ep in range(5) for i in range(3)]


def test_warm_up_runs_two_steps_and_one_eval_batch_on_its_own_task():
    cfg = FakeConfig(epochs=1, accuracies=(0.9,))
    warm = FakeConfig(epochs=1)
    res, phases = run(cfg, warm_up_task=lambda: warm.build_task(torch.device("cpu")))
    assert warm.log == ["init", ("step", 0, 0), ("step", 0, 1), ("eval", True, 1)]
    assert "warmup" in phases.seconds and res.tta_epoch == 1
    assert list(phases.seconds)[0] == "warmup"  # before the clock starts


def test_loss_trajectory_crosses_epochs_and_reads_per_example_losses():
    cfg = FakeConfig(steps_per_epoch=2, batch=4)
    losses = train.loss_trajectory(cfg, 5)
    assert losses == [0 / 4, 1 / 4, 100 / 4, 101 / 4, 200 / 4]
    assert cfg.log[0] == "init" and sum(e[0] == "step" for e in cfg.log[1:]) == 5  # no step beyond


def test_accuracy_latency_and_batched():
    x = torch.arange(6.0, 0.0, -1.0).repeat(10, 1)  # logits rank classes 0, 1, ..., 5
    y = torch.tensor([0, 1, 5] * 3 + [0])
    top1, top5 = train.accuracy(lambda v: v, train.batched(x, y, 4), top5=True)
    assert (top1, top5) == (0.4, 0.7)
    assert [len(b[0]) for b in train.batched(x, y, 4)] == [4, 4, 2]
    task = FakeConfig().build_task(torch.device("cpu"))
    ms, n = train.measure_latency(task, tta=False, n=100)
    assert n == 5 and ms > 0  # capped at the number of images
