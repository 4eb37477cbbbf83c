"""The clocked evaluation: BN folded into convs allocated once
and rewritten in place, one view of the whole test set in a few large
batches, the unsure set read once, the counts read once; its accuracy is the
per-batch evaluation's it replaced, exactly, on the CPU."""

from __future__ import annotations

import functools

import pytest
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast.cifar import Config
from dawnbench_fast.cifar.evaluation import evaluate, inference_net
from dawnbench_fast.cifar.tta import eval_batch, selective_tta_logits
from dawnbench_fast.execution.runtime import autocast
from dawnbench_fast.models.cifar_net import FoldedCifarNet
from dawnbench_fast.training.train import accuracy, batched


@functools.cache
def _trained_task(precision: str):
    cfg = Config(subset=500, eval_subset=300, batch_size=100, epochs=2, whiten_images=200,
                 widths=(16, 32, 32),
                 precision=precision, kernels="torch", data_dir=str(cifar_dir()), download=False,
                 eval_batch_size=120, tta_below=0.5)
    task = cfg.build_task(torch.device("cpu"))
    task.init_model()
    for epoch in range(2):
        for batch in task.epoch_batches(epoch):
            task.train_step(*batch)
    return task


def _per_batch_accuracy(task, level: int) -> float:
    """The evaluation as it was before the captured step: selective TTA batch by batch
    (a one-view forward, a host read of the unsure set and its views each)."""
    cfg, data = task.cfg, task.data
    net = inference_net(task.model, precision=cfg.precision)  # the same net, a fresh fold
    batch = eval_batch(cfg.eval_batch_size, level)
    with torch.no_grad(), autocast(cfg.precision, task.device):
        top1, _ = accuracy(lambda x: selective_tta_logits(net, x, level, cfg.tta_below, batch),
                           batched(data.test_x, data.test_labels, batch))
    return top1


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_clocked_evaluation_matches_the_per_batch_one_exactly(precision):
    task = _trained_task(precision)
    for level in (0, 1, 2):
        old = _per_batch_accuracy(task, level)
        got = evaluate(task.folded(), task.data, task.cfg, task.device, level)
        assert got == old, (precision, level)
        assert 0.15 < got < 1.0  # trained a little: above chance, so the comparison means something
    assert task.evaluate(tta=True).top1 == _per_batch_accuracy(task, task.cfg.tta_level)


def test_the_fold_is_rewritten_in_place_and_equals_a_fresh_fold():
    task = _trained_task("bf16")
    first = task.folded()
    pointers = [p.data_ptr() for p in first.parameters()]
    for batch in task.epoch_batches(0):  # the net moves on
        task.train_step(*batch)
    again = task.folded()
    assert again is first and [p.data_ptr() for p in again.parameters()] == pointers
    fresh = inference_net(task.model, precision="bf16")
    assert fresh is not first
    for (name, a), (_, b) in zip(again.state_dict().items(), fresh.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert not again.training and again.source is task.model


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_folded_convs_are_kept_in_the_compute_dtype_with_the_same_logits(precision):
    """The evaluation's folded convs, whitening conv and head are stored in
    the dtype its autocast computes in, so that autocast does not cast every
    weight again at each one-image forward; the logits are those of fp32
    folded convs cast by autocast, bit for bit, one view and every TTA view (both nets on
    F.conv2d and ATen's activations here: oneDNN's reordered weight and
    fused activation, which the CPU's evaluation takes, may sum and round
    otherwise, tests/ops/test_inference_conv.py)."""
    task = _trained_task(precision)
    want = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    net = inference_net(task.model, precision=precision)
    assert {p.dtype for p in net.parameters()} == {want}  # the folded convs, the whitening conv, the head
    assert {p.dtype for p in task.folded().parameters()} == {want}
    own = {p.data_ptr() for p in net.parameters()}
    assert not own & {p.data_ptr() for p in task.model.parameters()}  # copies, not the training net's
    cast_each_call = FoldedCifarNet(task.model).to(memory_format=torch.channels_last)  # fp32 convs
    for conv in (net.whiten, *net.convs, cast_each_call.whiten, *cast_each_call.convs):
        conv.reorder = False
    x = task.data.test_x[:37]
    with torch.no_grad(), autocast(precision, task.device):
        for level in (0, 2):
            got = selective_tta_logits(net, x, level, 2.0, 64)  # tta_below 2: every image takes the views
            ref = selective_tta_logits(cast_each_call, x, level, 2.0, 64)
            assert got.dtype == ref.dtype and torch.equal(got, ref), (precision, level)
            assert torch.isfinite(got).all()
