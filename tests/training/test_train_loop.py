"""The task-agnostic loop (dawnbench_fast.training.train) driven by a fake task: which
epochs it evaluates, with or without TTA, when the clock stops, what each
phase holds, and that loss_trajectory needs nothing but a config that builds
its task. No dataset, no real model: well under a second."""

from __future__ import annotations

import pytest
import torch
from support.fake_task import EVAL_S, INIT_S, SHOW_S, STEP_S, TTA_EVAL_S, FakeConfig

from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.reporting import bench
from dawnbench_fast.runner import runs
from dawnbench_fast.training import latency, train
from dawnbench_fast.training.task import StepLoss, loop_epochs, steps_in
from dawnbench_fast.training.train import Phases


def run(cfg: FakeConfig, **kw) -> tuple[train.LoopResult, Phases]:
    phases = Phases(torch.device("cpu"), timer=cfg.timer)
    task = cfg.build_task(torch.device("cpu"))
    return train.train(task, phases, progress=False, **kw), phases


def test_the_clock_charges_every_checked_evaluation_and_the_tsv_hours_run_with_it(capsys):
    cfg = FakeConfig()  # --eval-every 1: every evaluation is checked and written, so charged
    res, phases = run(cfg)
    epoch_s = 3 * STEP_S
    assert [r.epoch for r in res.rows] == [1, 2, 3, 4]
    assert [r.tta for r in res.rows] == [False, False, False, True]
    # the running clock: init + training so far + every charged evaluation so far
    clocks = [INIT_S + epoch_s + EVAL_S, INIT_S + 2 * epoch_s + 2 * EVAL_S,
              INIT_S + 3 * epoch_s + 3 * EVAL_S, INIT_S + 4 * epoch_s + 3 * EVAL_S + TTA_EVAL_S]
    assert [r.clock_seconds for r in res.rows] == clocks
    assert [r.hours for r in res.rows] == [c / 3600 for c in clocks]
    assert [r.eval_seconds for r in res.rows] == [EVAL_S] * 3 + [TTA_EVAL_S]
    # 0.6 at epoch 2 is the first to reach 0.5: the time to accuracy is that row's clock
    assert (res.time_to_target_epoch, res.time_to_target_seconds) == (2, clocks[1])
    assert res.final.top1 == 0.7
    assert phases.seconds == {"init": INIT_S, "train": 4 * epoch_s, "eval": 3 * EVAL_S + TTA_EVAL_S}
    assert phases.clock == clocks[-1]
    tsv = bench.tsv_text(res.rows).splitlines()
    assert tsv[0] == "epoch\thours\ttop1Accuracy" and tsv[2] == f"2\t{clocks[1] / 3600:.6f}\t60.00"
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"seed 7 epoch 1/4: test top-1 10.00% (tta 0), clock {clocks[0]:.1f} s"
    assert out[3] == f"seed 7 epoch 4/4: test top-1 70.00% (tta 1), clock {clocks[3]:.1f} s"


def test_by_default_only_the_final_evaluation_is_charged_and_display_ones_are_not(capsys):
    cfg = FakeConfig(eval_every=0, show_every=1, accuracies=(0.7,))
    res, phases = run(cfg)
    epoch_s = 3 * STEP_S
    # three display-only evaluations (0.99 each, above the target) are neither checked nor written
    assert [r.epoch for r in res.rows] == [4]
    assert res.rows[0].clock_seconds == INIT_S + 4 * epoch_s + TTA_EVAL_S
    assert (res.time_to_target_epoch, res.time_to_target_seconds) == (4, INIT_S + 4 * epoch_s + TTA_EVAL_S)
    assert phases.seconds["display_eval"] == 3 * SHOW_S
    assert phases.clock == INIT_S + 4 * epoch_s + TTA_EVAL_S  # display time is outside
    out = capsys.readouterr().out.splitlines()
    assert [("display only" in line) for line in out] == [True, True, True, False]


def test_eval_every_and_log_tta_and_a_target_never_reached():
    cfg = FakeConfig(eval_every=3, log_eval_tta=True, accuracies=(0.2, 0.3), epochs=5)
    res, phases = run(cfg)
    assert [r.epoch for r in res.rows] == [3, 5]  # every 3rd, and always the last
    assert all(r.tta for r in res.rows)
    assert res.time_to_target_seconds is None and res.time_to_target_epoch is None
    assert res.final.clock_seconds == phases.clock == INIT_S + 15 * STEP_S + 2 * TTA_EVAL_S
    steps = [e for e in cfg.log if e[0] == "step"]
    assert steps == [("step", ep, i) for ep in range(5) for i in range(3)]


def test_warm_up_runs_two_steps_and_one_eval_batch_on_its_own_task_outside_the_clock():
    cfg = FakeConfig(epochs=1, accuracies=(0.9,))
    warm = FakeConfig(epochs=1, timer=cfg.timer)
    res, phases = run(cfg, warm_up_task=lambda: warm.build_task(torch.device("cpu")))
    assert warm.log == ["init", ("step", 0, 0), ("step", 0, 1), ("eval", True, 1)]
    assert phases.seconds["warmup"] == INIT_S + 2 * STEP_S + TTA_EVAL_S
    assert list(phases.seconds)[0] == "warmup"  # before the clock starts
    assert res.time_to_target_seconds == INIT_S + 3 * STEP_S + TTA_EVAL_S  # the warm-up is not in it


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
    lat = latency.measure_latency(task, tta=False, n=100)
    assert lat.images == 5 and lat.ms > 0  # capped at the number of images
    assert lat.top1 == 0.6 and lat.whole_test_set  # the loop's own predictions, scored


def test_accuracy_reads_its_counts_back_once(monkeypatch):
    """The counts stay on the device over the batches (an evaluation
    on the clock that a GPU can run without a synchronisation per batch) and
    are read once at the end; top-1 and top-5 as a hand count gives them."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(37, 10, generator=gen), torch.randint(0, 10, (37,), generator=gen)
    want1 = sum(int(x[i].argmax() == y[i]) for i in range(37)) / 37
    want5 = sum(int(y[i] in x[i].topk(5).indices) for i in range(37)) / 37
    reads = []
    for name in ("item", "tolist"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda t, _r=real, _n=name: reads.append(_n) or _r(t))
    top1, top5 = train.accuracy(lambda v: v, train.batched(x, y, 8), top5=True)  # 5 batches, the last of 5
    assert (top1, top5) == (want1, want5) and 0 < want1 < want5 < 1
    assert reads == ["tolist"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_loss_stops_the_run_with_its_step(bad):
    cfg = FakeConfig(epochs=3, steps_per_epoch=3)
    task = cfg.build_task(torch.device("cpu"))
    real_step = task.train_step

    def step(epoch: int, i: int):
        loss = real_step(epoch, i)
        return StepLoss(torch.tensor(bad), loss.examples) if (epoch, i) == (1, 2) else loss

    task.train_step = step
    with pytest.raises(train.NonFiniteLoss, match=r"^step 6: the training loss is not finite") as e:
        train.train(task, Phases(task.device, timer=cfg.timer), progress=False)
    assert "\n" not in str(e.value) and "--set lr_filters" in str(e.value)
    assert ("step", 2, 0) not in cfg.log  # stopped at once, not at the epoch's end


def test_out_of_memory_is_one_line_with_a_smaller_batch():
    with pytest.raises(ConfigError, match=r"--batch-size 2000: out of CUDA memory .* try --batch-size 1000"):
        with runs.out_of_memory_hint(2000, torch.device("cuda:0")):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_a_fractional_length_stops_the_last_epoch_part_way():
    # 2.5 epochs of 4 steps = 10 steps: the third epoch stops after its second
    # step, and its evaluation is the final one (with TTA, on the clock)
    cfg = FakeConfig(epochs=2.5, steps_per_epoch=4, eval_every=0, accuracies=(0.7,))
    res, phases = run(cfg)
    steps = [e for e in cfg.log if isinstance(e, tuple) and e[0] == "step"]
    assert steps == [("step", e, i) for e in range(2) for i in range(4)] + [("step", 2, 0), ("step", 2, 1)]
    assert [(r.epoch, r.tta) for r in res.rows] == [(3, True)]
    assert phases.seconds == {"init": INIT_S, "train": 10 * STEP_S, "eval": TTA_EVAL_S}
    assert res.time_to_target_seconds == INIT_S + 10 * STEP_S + TTA_EVAL_S
    assert loop_epochs(7.63) == 8 and loop_epochs(8) == 8
    assert [steps_in(e, 32) for e in (7.63, 8, 0.19)] == [245, 256, 7]
    assert steps_in(0.1 * 3, 10) == 3  # 0.30000000000000004 epochs: not 4 steps
