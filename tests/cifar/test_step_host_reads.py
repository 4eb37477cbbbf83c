"""No host reads in the training step: its batches (the epoch's order on the
device, the keyed augmentation, the jitter, the smaller image) and its
update run with every Tensor-to-Python conversion trapped to raise
(support/host_reads.py), on the reference kernels and on the CPU's own; the
static step (what a CUDA graph captures) also with every tensor
made from host values trapped, and bn_act's and augment's faces, Triton's
launchers included, call by call (inside the graph they may read
nothing back and copy nothing from the host)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.cifar_data import cifar_dir
from support.host_reads import HostRead, HostTensor, no_host_reads, no_host_tensors

from dawnbench_fast import dispatch
from dawnbench_fast.cifar import Config
from dawnbench_fast.cifar.step import StepKey, make_batch
from dawnbench_fast.data import augment as A


def test_the_trap_catches_each_kind_of_read():
    t = torch.tensor([1.5])
    reads = (lambda: t.item(), lambda: t.tolist(), lambda: t.numpy(), lambda: t.cpu(), lambda: bool(t),
             lambda: int(t), lambda: float(t), lambda: [0, 1][torch.tensor(1)], lambda: np.asarray(t))
    for read in reads:  # looked up inside the trap, as the step's code does
        with no_host_reads(), pytest.raises(HostRead):
            read()
    assert t.item() == 1.5  # and lets go after
    for make in (lambda: torch.tensor([1.0]), lambda: torch.as_tensor([1]), lambda: torch.asarray([2]),
                 lambda: torch.from_numpy(np.zeros(2))):
        with no_host_tensors(), pytest.raises(HostTensor):
            make()
    assert torch.tensor([2.0]).item() == 2.0


@pytest.mark.parametrize("kernels", ["torch", "cpu"])
@pytest.mark.parametrize("mode", ["downsample", "crop"])
def test_batches_and_steps_read_no_tensor_back(kernels, mode):
    if kernels == "cpu" and (reason := dispatch.unavailable_reason("cpu", torch.device("cpu"))) is not None:
        pytest.skip(f"--kernels cpu unavailable here: {reason}")
    base = Config(subset=150, eval_subset=100, batch_size=50, epochs=2, whiten_images=100,
                  progressive=(24,), progressive_mode=mode, cutout=6, brightness=0.1, contrast=0.1,
                  kernels=kernels, precision="bf16" if kernels == "cpu" else "fp32",
                  data_dir=str(cifar_dir()), download=False)
    task = base.build_task(torch.device("cpu"))
    task.init_model()
    sides = []
    with no_host_reads():
        for epoch in range(2):  # 24 px, then 32: the whitening bias trained, then frozen
            for key, in task.epoch_batches(epoch):
                sides.append(make_batch(task.state, key, key.side).shape[-1])
                loss = task.train_step(key)
    assert sides == [24] * 3 + [32] * 3 and task.step == 6
    assert 0 < loss.per_example() < 10
    # the same steps with the trap off, on the same data: the trap changed nothing
    again = type(task)(base, task.data, task.device, task.backend)
    again.init_model()
    for epoch in range(2):
        for batch in again.epoch_batches(epoch):
            last = again.train_step(*batch)
    assert torch.equal(last.total, loss.total)


def test_the_forward_and_loss_trace_as_one_graph():
    """The step's forward and loss under ``torch.compile(fullgraph=True)``: a
    host read (or anything else that breaks the graph) fails it. The
    augmentation's and the optimisers' pieces are traced whole in
    tests/ops/test_augment_hash.py and tests/optim/test_updates.py."""
    from dawnbench_fast.cifar.step import forward_loss

    cfg = Config(subset=300, eval_subset=100, batch_size=100, epochs=2, whiten_images=100,
                 widths=(16, 32, 32), kernels="torch", precision="fp32", data_dir=str(cifar_dir()),
                 download=False)
    task = cfg.build_task(torch.device("cpu"))
    task.init_model()
    key, = next(task.epoch_batches(0))
    x, y = make_batch(task.state, key, key.side), task.data.train_labels[key.idx]
    compiled = torch.compile(forward_loss, fullgraph=True, backend="aot_eager", dynamic=False)
    for whiten_bias_grad in (True, False):
        got = compiled(task.model, x, y, whiten_bias_grad, "fp32", cfg.label_smoothing)
        want = forward_loss(task.model, x, y, whiten_bias_grad, "fp32", cfg.label_smoothing)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


# CPU outputs allocated through NumPy (huge pages; no host values): csrc/engine.py's new_output
# (on CUDA torch.empty) and the CPU-only fused pool's codes (csrc/bn_act.py's _codes)
CPU_ALLOCATION = ("dawnbench_fast.csrc.engine", "dawnbench_fast.csrc.bn_act")


@pytest.fixture
def one_thread():
    """One intra-op thread for a tiny step: two spinning on a shared 2-core machine cost 30x."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _skip_unavailable(backend: str) -> None:
    if (reason := dispatch.unavailable_reason(backend, torch.device("cpu"))) is not None:
        pytest.skip(f"--kernels {backend} unavailable here: {reason}")


@pytest.mark.parametrize("kernels", ["torch", "cpu"])
def test_the_static_step_reads_nothing_back_and_makes_no_host_tensor(kernels, one_thread):
    """capture=static: the captured step's body (batch from the static
    inputs, then forward, backward and both optimisers) run eagerly, step
    after step, as a graph would replay it, with both traps set."""
    if kernels != "torch":
        _skip_unavailable(kernels)
    cfg = Config(subset=150, eval_subset=50, batch_size=50, epochs=2, whiten_images=50, widths=(8, 16, 16),
                 progressive=(24,), cutout=4, brightness=0.1, contrast=0.1, capture="static", kernels=kernels,
                 precision="bf16" if kernels == "cpu" else "fp32", data_dir=str(cifar_dir()), download=False)
    task = cfg.build_task(torch.device("cpu"))
    task.init_model()
    assert task.plan.uses_static_step and task.state.stepper.static is not None
    for epoch in range(2):
        batches = list(task.epoch_batches(epoch))  # the epoch's order: one copy an epoch, outside the step
        for key, in batches:
            assert isinstance(key, StepKey)
            if task.step == 0:  # one-off set-up (lazily made kernels' state): the warm-up's, before capture
                task.train_step(key)
                continue
            with no_host_reads(), no_host_tensors(allow=CPU_ALLOCATION):
                loss = task.train_step(key)
    assert task.step == 6 and 0 < loss.per_example() < 10


@pytest.mark.parametrize("face", ["torch", "cpu", "triton"])
def test_bn_act_and_augment_read_nothing_back_per_call(face, monkeypatch):
    """Each face's call (forward and backward for bn_act) with both traps
    set, after a first call outside them (lazy set-up, allowed once). Under
    the Triton interpreter the interpreter's own host copies pass: the
    launchers around them are what is checked."""
    if face != "torch":
        _skip_unavailable(face)
    if face == "triton":
        from dawnbench_fast.kernels import launches

        monkeypatch.setattr(launches, "INTERPRETER_ROWS", 16)
    bn_act, augment = dispatch.get_op("bn_act", face), dispatch.get_op("augment", face)
    bn = torch.nn.BatchNorm2d(5).train()
    images = np.random.default_rng(0).integers(0, 256, size=(6, 9, 9, 3), dtype=np.uint8)
    padded = A.pad_reflect(torch.from_numpy(images), 2)
    scale, shift = torch.full((3,), 0.02), torch.full((3,), -1.0)
    idx = torch.tensor([4, 1, 5])
    params = A.augment_params(1, 0, idx, translate=2, cutout=3)

    def calls():
        x = torch.randn(3, 5, 7, 9, requires_grad=True)
        bn_act(x, bn, "gelu").sum().backward()
        return augment(padded, idx, params, scale, shift, size=9)

    calls()
    launched = _launches()
    with no_host_reads(allow=("triton.",)), no_host_tensors(allow=("triton.", *CPU_ALLOCATION)):
        out = calls()
    assert out.shape == (3, 3, 9, 9) and torch.isfinite(out).all()
    if face == "triton":  # the kernels ran inside the traps: stats, affine + act, backward, augment
        ran = {k for k, n in _launches().items() if n > launched.get(k, 0)}
        assert {"affine_act", "bn_act_bwd_apply", "augment"} <= ran, ran


def _launches() -> dict[str, int]:
    from dawnbench_fast.kernels import launch_counts

    return dict(launch_counts)
