"""No host reads in the training step: its batches (the epoch's order on the
device, the keyed augmentation, the jitter, the smaller image) and its
update run with every Tensor-to-Python conversion trapped to raise
(support/host_reads.py), on the reference kernels and on the CPU's own."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from support.cifar_data import cifar_dir
from support.host_reads import HostRead, no_host_reads

from dawnbench_fast import dispatch
from dawnbench_fast.cifar import Config


def test_the_trap_catches_each_kind_of_read():
    t = torch.tensor([1.5])
    reads = (lambda: t.item(), lambda: t.tolist(), lambda: t.numpy(), lambda: t.cpu(), lambda: bool(t),
             lambda: int(t), lambda: float(t), lambda: [0, 1][torch.tensor(1)], lambda: np.asarray(t))
    for read in reads:  # looked up inside the trap, as the step's code does
        with no_host_reads(), pytest.raises(HostRead):
            read()
    assert t.item() == 1.5  # and lets go after


@pytest.mark.parametrize("kernels", ["torch", "cpu"])
@pytest.mark.parametrize("mode", ["downsample", "crop"])
def test_batches_and_steps_read_no_tensor_back(kernels, mode):
    if kernels == "cpu" and (reason := dispatch.unavailable_reason("cpu", torch.device("cpu"))) is not None:
        pytest.skip(f"--kernels cpu unavailable here: {reason}")
    base = Config(subset=300, eval_subset=100, batch_size=100, epochs=2, whiten_images=100,
                  progressive=(24,), progressive_mode=mode, cutout=6, brightness=0.1, contrast=0.1,
                  kernels=kernels, precision="bf16" if kernels == "cpu" else "fp32",
                  data_dir=str(cifar_dir()), download=False)
    task = base.build_task(torch.device("cpu"))
    task.init_model()
    sides = []
    with no_host_reads():
        for epoch in range(2):  # 24 px, then 32: the whitening bias trained, then frozen
            for idx, x in task.epoch_batches(epoch):
                sides.append(x.shape[-1])
                loss = task.train_step(idx, x)
    assert sides == [24] * 3 + [32] * 3 and task.step == 6
    assert 0 < loss.per_example() < 10
    # the same steps with the trap off: the trap changed nothing
    again = dataclasses.replace(base).build_task(torch.device("cpu"))
    again.init_model()
    for epoch in range(2):
        for idx, x in again.epoch_batches(epoch):
            last = again.train_step(idx, x)
    assert torch.equal(last.total, loss.total)


def test_the_forward_and_loss_trace_as_one_graph():
    """The step's forward and loss under ``torch.compile(fullgraph=True)``: a
    host read (or anything else that breaks the graph) fails it. The
    augmentation's and the optimisers' pieces are traced whole in
    tests/ops/test_augment_hash.py and tests/optim/test_updates.py."""
    from dawnbench_fast.cifar.task import forward_loss

    cfg = Config(subset=300, eval_subset=100, batch_size=100, epochs=2, whiten_images=100,
                 widths=(16, 32, 32), kernels="torch", precision="fp32", data_dir=str(cifar_dir()),
                 download=False)
    task = cfg.build_task(torch.device("cpu"))
    task.init_model()
    idx, x = next(task.epoch_batches(0))
    y = task.data.train_labels[idx]
    compiled = torch.compile(forward_loss, fullgraph=True, backend="aot_eager", dynamic=False)
    for whiten_bias_grad in (True, False):
        got = compiled(task.model, x, y, whiten_bias_grad, "fp32", cfg.label_smoothing)
        want = forward_loss(task.model, x, y, whiten_bias_grad, "fp32", cfg.label_smoothing)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
