"""The step's state allocated once, up front (cifar/train_state.py): a
seed trained on a state reset in place (after a warm-up seed and after
another seed) ends bit for bit where a freshly built one does, its tensors
never rebound, none made after the task that allocated them; a state is not
shared across configs."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast import dispatch
from dawnbench_fast.cifar import CifarTask, Config
from dawnbench_fast.cifar.step import TrainState, mutable_tensors
from dawnbench_fast.cifar.task import shared_tasks
from dawnbench_fast.training.train import train_epoch, warm_up


def _config(kernels: str, **kw) -> Config:
    return Config(subset=300, eval_subset=100, batch_size=100, epochs=2, whiten_images=100, progressive=(24,),
                  average_every=1, average_from=4, kernels=kernels,
                  precision="fp32" if kernels == "torch" else "bf16", data_dir=str(cifar_dir()),
                  download=False, **kw)


def _train(task: CifarTask, steps: int) -> dict[str, torch.Tensor]:
    """``steps`` steps from init; the net's state, the optimisers' buffers and the average."""
    task.init_model()
    training = all(m.training for m in task.model.modules())
    done = 0
    for epoch in range(2):
        for batch in task.epoch_batches(epoch):
            if done == steps:
                break
            task.train_step(*batch)
            done += 1
    out = {f"model.{k}": v.clone() for k, v in task.model.state_dict().items()}
    for i, opt in enumerate(task.optimizers):
        for j, p in enumerate(opt.state):
            out[f"opt{i}.{j}"] = opt.state[p]["momentum_buffer"].clone()
    out.update({f"avg.{i}": a.clone() for i, a in enumerate(task.averager.state_dict() or [])})
    return {**out, "training": training}


@pytest.mark.parametrize("kernels", ["torch", "cpu"])
def test_a_reset_state_trains_each_seed_as_a_fresh_build(kernels):
    if kernels == "cpu" and (reason := dispatch.unavailable_reason("cpu", torch.device("cpu"))) is not None:
        pytest.skip(f"--kernels cpu unavailable here: {reason}")
    base = _config(kernels)
    data = base.build_task(torch.device("cpu"))  # one placed data set for every task below
    def task(seed: int, state: TrainState | None = None) -> CifarTask:
        return CifarTask(dataclasses.replace(base, seed=seed), data.data, data.device, data.backend, state)

    warm = task(9999)  # the warm-up's seed, as runner/runs.py does: it ends evaluating
    shared = warm.state
    _train(warm, 2)
    warm.warm_up_evaluation()
    assert not shared.model.training
    params = [p.data_ptr() for p in shared.model.parameters()]
    for seed in (0, 1):
        reset, fresh = _train(task(seed, shared), 5), _train(task(seed), 5)
        assert reset.pop("training") and fresh.pop("training")  # reset to train mode, as built
        assert reset.keys() == fresh.keys() and any(k.startswith("avg.") for k in reset)
        for name, want in fresh.items():
            assert torch.equal(reset[name], want), (seed, name)
    assert [p.data_ptr() for p in shared.model.parameters()] == params  # reset in place: the same memory
    other_seed = _train(task(0), 5)["model.head.weight"]
    assert not torch.equal(reset["model.head.weight"], other_seed)  # the seeds differ


def test_a_state_serves_one_config_only():
    base = _config("torch")
    data = base.build_task(torch.device("cpu"))
    shared = CifarTask(base, data.data, data.device, data.backend).state
    other = dataclasses.replace(base, lr_head=0.1)
    with pytest.raises(ValueError, match="built for another config"):
        CifarTask(other, data.data, data.device, data.backend, shared)


def _memory(state: TrainState) -> dict[str, list[int]]:
    """The address of every tensor the step and the evaluation read or write."""
    data, stepper = state.data, state.stepper
    return {"mutable": [t.data_ptr() for t in mutable_tensors(state)],
            "data": [t.data_ptr() for t in (data.padded, data.test_x, data.whiten_x)],
            "tables": [state.lr_table.data_ptr(), *(t.data_ptr() for o in state.optimizers
                                                    for t in getattr(o, "_renorm_tables", {}).values())],
            "average": [t.data_ptr() for t in state.averager.average],
            "folded": [t.data_ptr() for t in state.folded.parameters()],
            "static": [t.data_ptr() for t in (stepper.static.idx, stepper.static.epoch, stepper.static.seed)]}


def test_the_state_is_allocated_before_the_warm_up_and_only_written_after():
    """Everything the step reads is allocated when the run's first task is
    made (before the warm-up, with the data's padded and normalised memory):
    the warm-up, each seed's init and steps, and the evaluation make none of
    it anew. Each optimiser's state has its buffers before any step."""
    cfg = _config("torch", capture="static")
    data = cfg.build_task(torch.device("cpu"))
    make = shared_tasks(data.data, data.device, data.backend)
    run = make(cfg)
    before = _memory(run.state)
    assert all(len(o.state) == sum(len(g["params"]) for g in o.param_groups) for o in run.optimizers)
    warm_up(make(dataclasses.replace(cfg, seed=9999)))
    for seed in (0, 1):
        task = make(dataclasses.replace(cfg, seed=seed))
        task.init_model()
        for epoch in range(2):
            train_epoch(task, epoch)
        task.evaluate(tta=True)
        assert _memory(task.state) == before, seed


def test_a_resumed_state_is_loaded_into_the_buffers_a_captured_step_reads():
    """--resume under a captured step: the optimisers' saved state is copied
    into the buffers they hold (the graphs' addresses), not swapped for new
    tensors as torch's load_state_dict does."""
    from dawnbench_fast.cifar.train_state import load_state_in_place
    from dawnbench_fast.optim.sgd import NesterovSGD

    torch.manual_seed(3)
    params = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(4))]
    opt = NesterovSGD(params, lr=0.1, momentum=0.9)
    for _ in range(2):
        for p in params:
            p.grad = torch.randn_like(p)
        opt.step()
    saved = copy.deepcopy(opt.state_dict())
    for p in params:  # the run goes on: the buffers move away from the saved values
        p.grad = torch.randn_like(p)
    opt.step()
    buffers = [opt.state[p]["momentum_buffer"] for p in params]
    pointers = [b.data_ptr() for b in buffers]
    load_state_in_place(opt, saved)
    now = [opt.state[p]["momentum_buffer"] for p in params]
    assert [b.data_ptr() for b in now] == pointers and all(a is b for a, b in zip(now, buffers, strict=True))
    for b, want in zip(now, saved["state"].values(), strict=True):
        assert torch.equal(b, want["momentum_buffer"])
    plain = NesterovSGD(params, lr=0.1, momentum=0.9)
    plain.step()
    plain.load_state_dict(saved)  # torch's own: new tensors (what load_state_in_place guards against)
    assert plain.state[params[0]]["momentum_buffer"].data_ptr() != pointers[0]
