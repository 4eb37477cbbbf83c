"""The step with static inputs (cifar/step.py), run eagerly on the CPU
as a captured graph would replay it: bit for bit the eager step's trajectory
over a change of side and of whitening-bias state, every buffer it reads or
keeps at the same address from step to step."""

from __future__ import annotations

import pytest
import torch
from support.cifar_data import cifar_dir
from support.recorders import ReplayingRecorder
from support.seed_runs import seed_runs

from dawnbench_fast.cifar import Config
from dawnbench_fast.cifar import step as cifar_step
from dawnbench_fast.cifar.step import StaticKeys, StepKey, StepVariant, train_step
from dawnbench_fast.data.progressive import epoch_side


@pytest.mark.parametrize("mode", ["downsample", "crop"])
def test_static_inputs_train_as_the_eager_step(mode):
    cfg = Config(subset=300, eval_subset=100, batch_size=100, epochs=3, whiten_images=100,
                 progressive=(24, 28), progressive_mode=mode, whiten_bias_epochs=1.5, cutout=6,
                 brightness=0.1, contrast=0.1, average_from=3, precision="fp32", kernels="torch",
                 data_dir=str(cifar_dir()), download=False)
    base = cfg.build_task(torch.device("cpu"))

    def eager() -> dict:
        task = type(base)(cfg, base.data, base.device, base.backend)
        task.init_model()
        losses = [task.train_step(*b).total for e in range(3) for b in task.epoch_batches(e)]
        return {"losses": losses, **task.model.state_dict()}

    task = type(base)(cfg, base.data, base.device, base.backend)
    task.init_model()
    static = StaticKeys(cfg.batch_size, task.device)
    losses, seen, addresses = [], [], None
    for epoch in range(3):
        side = epoch_side(cfg.progressive, epoch, 32)
        for i, row in enumerate(task.epoch_rows(epoch)):
            variant = StepVariant(side, task.whiten_bias_grad())
            seen.append(variant)
            key = static.load(StepKey(row, epoch, i, cfg.seed, side))
            losses.append(train_step(task.state, key, variant))
            task.step += 1
            task.averager.after_step(task.step)
            now = [t.data_ptr() for t in (static.idx, static.epoch, static.index, static.seed,
                                          task.data.padded, task.state.lr_table,
                                          task.state.step_t, *task.model.parameters(),
                                          *(s["momentum_buffer"] for o in task.optimizers
                                            for s in o.state.values()))]
            assert addresses is None or now == addresses, (epoch, i)
            addresses = now
    # the variants the plan names: the bias trains for 1.5 epochs of 3 steps, across 24 and 28 px
    assert list(dict.fromkeys(seen)) == [StepVariant(24, True), StepVariant(28, True), StepVariant(28, False),
                                         StepVariant(32, False)]
    want = eager()
    assert [x.item() for x in losses] == [x.item() for x in want.pop("losses")]
    for name, value in task.model.state_dict().items():
        assert torch.equal(value, want[name]), name


def _runs(capture: str, seeds: tuple[int, ...], recorder=None):
    """(losses, weights, step records) of a warm-up and ``seeds`` (support/seed_runs.py)."""
    runs = seed_runs(capture, seeds, recorder)
    return runs.losses, runs.weights, runs.records


def test_the_static_step_through_the_loop_is_the_eager_step_for_every_seed():
    """``capture=static`` (the captured step's plumbing, without graphs) run
    as the command runs it: a warm-up on a seed of its own, then two seeds,
    one shared state. Each seed's losses and final weights are the eager
    step's bit for bit: the seed reaches the augmentation through its static
    buffer (a graph captured in the warm-up replays the seeds' own
    augmentations, not the warm-up's), and the data re-prepared by each
    seed's init stays where the step reads it."""
    eager = _runs("off", (0, 1))
    static = _runs("static", (0, 1))
    assert static[0] == eager[0]
    assert static[0][0] != static[0][1]  # the two seeds differ
    for got, want in zip(static[1], eager[1], strict=True):
        for name, value in got.items():
            assert torch.equal(value, want[name]), name
    assert static[2][0]["static_inputs"] and not static[2][0]["captured"]
    assert "capture=static" in static[2][0]["eager_why"][0]
    assert eager[2][0] == {"captured": False, "static_inputs": False, "eager_why":
                           ["--set capture=off: the eager step, as asked"],
                           "variants": {"24px/whiten-bias": 1, "24px/frozen": 1, "32px/frozen": 2}}


def test_auto_on_the_cpu_keeps_the_eager_step_and_says_why():
    cfg = Config(subset=300, eval_subset=100, batch_size=100, epochs=1, whiten_images=100,
                 precision="fp32", kernels="torch", data_dir=str(cifar_dir()), download=False)
    task = cfg.build_task(torch.device("cpu"))
    task.init_model()
    record = task.step_record()
    assert not record["captured"] and not record["static_inputs"]
    assert record["eager_why"] == ["the step runs on cpu: CUDA graphs replay on CUDA devices only"]
    assert task.state.stepper.static is None  # the keys as given, no static buffers
    assert all(isinstance(key, StepKey) and not torch.is_tensor(key.epoch) for key, in task.epoch_batches(0))


def test_captured_steps_replay_for_every_seed_as_the_eager_step(monkeypatch):
    """The capture's control flow on the CPU: the warm-up records one graph
    per variant of the plan and replays each once; every later step of every
    seed replays its variant's graph (never the body directly) after loading
    its inputs, and the seeds' losses and weights are the eager step's."""
    recorder = ReplayingRecorder()
    calls = []
    real_body = cifar_step.train_step
    monkeypatch.setattr(cifar_step, "train_step",
                        lambda state, key, v: calls.append(v) or real_body(state, key, v))
    eager = _runs("off", (0, 1))
    calls.clear()
    got = _runs("static", (0, 1), recorder)
    assert got[0] == eager[0]
    for have, want in zip(got[1], eager[1], strict=True):
        for name, value in have.items():
            assert torch.equal(value, want[name]), name
    assert recorder.recorded == 3  # 24px with and without the bias, 32px frozen
    # the warm-up's 4 eager steps (2 at each side); each graph replayed once, then twice in its
    # self-test beside two eager bodies; then 4 steps of each seed, replayed
    assert recorder.replays == 3 * 3 + 2 * 4 and len(calls) == 4 + 3 * 3 + 3 * 2 + 2 * 4
    assert got[2][0]["captured"] and got[2][0]["graphs"] == ["24px/whiten-bias", "24px/frozen", "32px/frozen"]
