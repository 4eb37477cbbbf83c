"""Loss-guided epoch pruning (data/pruning.py) and the epoch plan it changes:
which images a pruned epoch leaves out, their weights, the steps of each
epoch, and a Trainer that prunes: its batches, its loss, its resume."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast.cifar import Config
from dawnbench_fast.data.pruning import dropped_count, prune_epoch, pruned_epoch
from dawnbench_fast.training.task import epoch_steps, steps_in
from dawnbench_fast.training.train import train_epoch


def test_which_epochs_are_pruned():
    assert [pruned_epoch(e, 9, 0.5, 0.875) for e in range(9)] == [False] + [True] * 7 + [False]
    assert not any(pruned_epoch(e, 9, 0.0, 0.875) for e in range(9))  # share 0: the lever is off
    assert [pruned_epoch(e, 4, 0.5, 0.5) for e in range(4)] == [False, True, False, False]


@pytest.mark.parametrize("n", [1000, 777])
def test_a_pruned_epoch_drops_only_low_loss_images_and_weighs_up_the_rest(n):
    gen = torch.Generator().manual_seed(n)
    loss = torch.rand(n, generator=gen) * 3
    order = np.random.default_rng(1).permutation(n)
    kept, weight = prune_epoch(order, loss, 0.4, seed=3, epoch=2)
    easy = set(torch.argsort(loss)[: n // 2].tolist())
    dropped = set(range(n)) - set(kept.tolist())
    assert len(dropped) == dropped_count(n, 0.4) == int(0.4 * (n // 2))
    assert dropped <= easy
    assert kept.tolist() == [i for i in order.tolist() if i not in dropped]  # the order is kept
    expect = torch.tensor([0.0 if i in dropped else (1 / 0.6 if i in easy else 1.0) for i in range(n)])
    torch.testing.assert_close(weight, expect)
    again, _ = prune_epoch(order, loss, 0.4, seed=3, epoch=2)
    other, _ = prune_epoch(order, loss, 0.4, seed=3, epoch=3)
    assert np.array_equal(again, kept) and not np.array_equal(other, kept)  # keyed by seed and epoch


def test_the_weighted_loss_of_a_pruned_epoch_is_unbiased():
    # Over many epochs' draws, the weighted sum over the kept images averages to
    # the full sum: each low-loss image stays with probability 1 - share.
    loss = torch.rand(1000, generator=torch.Generator().manual_seed(0)).pow(3)
    order = np.arange(1000)
    sums = []
    for epoch in range(400):
        kept, weight = prune_epoch(order, loss, 0.4, seed=0, epoch=epoch)
        sums.append(float((loss[kept] * weight[kept]).sum()))
    assert np.mean(sums) == pytest.approx(float(loss.sum()), rel=2e-3)
    # without the weights, it would be biased low by 0.4 of the easy half's loss
    easy = torch.argsort(loss)[:500]
    assert float(loss.sum() - 0.4 * loss[easy].sum()) < float(loss.sum()) * (1 - 5e-3)


@pytest.mark.parametrize("epochs", [1, 2.5, 7.63, 8, 9.99])
@pytest.mark.parametrize("per_epoch", [1, 4, 32, 97])
def test_epoch_plan_without_pruning_has_the_recipe_s_step_count(epochs, per_epoch):
    steps = epoch_steps(epochs, lambda e: per_epoch)
    assert sum(steps) == steps_in(epochs, per_epoch)
    assert steps[:-1] == [per_epoch] * (len(steps) - 1) and 0 < steps[-1] <= per_epoch


def _small(**kw) -> Config:
    return dataclasses.replace(
        Config(), subset=512, batch_size=64, widths=(16, 32, 32), epochs=3, whiten_images=512,
        data_dir=str(cifar_dir()), download=False, kernels="torch", precision="fp32", **kw)


def _weights(task) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in task.model.state_dict().items()}


def test_a_pruning_trainer_plans_visits_and_weighs_its_epochs():
    task = _small(prune=0.5).build_task(torch.device("cpu"))
    # 512 images, batch 64: 8 steps; pruned epochs drop 128 of the lower-loss 256: 6 steps
    assert task.epoch_steps == [8, 6, 6] and task.total_steps == 20
    assert _small().build_task(torch.device("cpu")).epoch_steps == [8, 8, 8]
    task.init_model()
    task.pruner.sample_loss = torch.rand(512, generator=torch.Generator().manual_seed(5)) + 0.1
    ranked = torch.argsort(task.pruner.sample_loss, stable=True)
    batches = list(task.epoch_batches(1))
    seen = torch.cat([key.idx for key, in batches])
    assert len(batches) == 6 and len(seen) == 384 == len(set(seen.tolist()))
    assert set(ranked[256:].tolist()) <= set(seen.tolist())  # every high-loss image trains
    easy_seen = set(seen.tolist()) & set(ranked[:256].tolist())
    assert len(easy_seen) == 128
    weight = task.pruner.weight
    assert weight[list(easy_seen)].eq(2.0).all() and weight[ranked[256:]].eq(1.0).all()
    before = task.pruner.sample_loss.clone()
    key, = batches[0]
    idx = key.idx
    loss = task.train_step(key)
    assert not torch.equal(task.pruner.sample_loss[idx], before[idx])  # the step recorded its losses
    untouched = torch.ones(512, dtype=torch.bool)
    untouched[idx] = False
    assert torch.equal(task.pruner.sample_loss[untouched], before[untouched])
    # the step's loss is the weighted sum of the losses it recorded
    torch.testing.assert_close(loss.total, (task.pruner.sample_loss[idx] * task.pruner.weight[idx]).sum())
    assert list(task.epoch_batches(0)) and task.pruner.weight is None  # epoch 0: all images, weight 1


def test_a_pruning_trainer_resumes_its_ranking_from_the_state():
    cfg = _small(prune=0.5)
    a = cfg.build_task(torch.device("cpu"))
    a.init_model()
    for epoch in (0, 1):
        train_epoch(a, epoch)
    state = copy.deepcopy(a.state_dict())  # a checkpoint: not the live tensors a goes on training
    assert torch.equal(state["sample_loss"], a.pruner.sample_loss) and a.pruner.sample_loss.gt(0).all()
    b = cfg.build_task(torch.device("cpu"))
    b.load_state_dict(state)
    c = cfg.build_task(torch.device("cpu"))
    c.load_state_dict({**state, "sample_loss": torch.zeros(512)})  # the ranking lost
    for task in (a, b, c):
        train_epoch(task, 2)
    wa, wb, wc = _weights(a), _weights(b), _weights(c)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)  # the ranking decides the epoch
