"""The step with static inputs (cifar/static_step.py), run eagerly on the CPU
as a captured graph would replay it: bit for bit the eager step's trajectory
over a change of side and of whitening-bias state, every buffer it reads or
keeps at the same address from step to step."""

from __future__ import annotations

import pytest
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast.cifar import Config
from dawnbench_fast.cifar.capture_plan import StepVariant
from dawnbench_fast.cifar.static_step import StaticStep
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
    static = StaticStep(task)
    losses, seen, addresses = [], [], None
    for epoch in range(3):
        side = epoch_side(cfg.progressive, epoch, 32)
        for i, row in enumerate(task.epoch_rows(epoch)):
            seen.append(StepVariant(side, task.whiten_bias_grad()))
            static.load(row, epoch, i)
            losses.append(static.body(side).total)
            now = [t.data_ptr() for t in (static.idx, static.epoch, static.index, task.state.lr_table,
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
