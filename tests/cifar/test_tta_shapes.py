"""Selective TTA's shapes on a GPU: on CUDA the unsure images' set
is padded to a few fixed sizes (tta.bucket_sizes) and the warm-up runs every
shape the final evaluation can meet, so that cuDNN's autotuning of each new
shape happens in the warm-up, not on the time-to-accuracy clock.

No GPU here: the padding is forced on (``pad=True``, or "cpu" added to
tta.PAD_DEVICES for the trainer's path), which runs the same code on the CPU.
"""

from __future__ import annotations

import math

import pytest
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast.cifar import CifarTask, Config, tta
from dawnbench_fast.cifar.evaluation import inference_net
from dawnbench_fast.cifar.tta import (
    MIN_BUCKET,
    bucket,
    bucket_sizes,
    selective_tta_logits,
    selective_tta_pass,
    warm_up_selective_pass,
)
from dawnbench_fast.models.cifar_net import CifarNet, FoldedCifarNet
from dawnbench_fast.runner.runs import warm_up_run


@pytest.mark.parametrize("cap", [1, 5, MIN_BUCKET, 9, 63, 64, 333, 1000])
def test_every_count_pads_to_a_fixed_size_at_most_twice_it_and_never_past_the_cap(cap):
    sizes = bucket_sizes(cap)
    assert sizes[-1] == cap and list(sizes) == sorted(set(sizes))
    assert all(m == cap or (m >= MIN_BUCKET and m & (m - 1) == 0) for m in sizes)  # powers of two
    assert len(sizes) <= max(1, math.ceil(math.log2(cap / MIN_BUCKET)) + 1)  # a few shapes, not one per count
    for n in range(1, cap + 1):
        m = bucket(n, cap)
        assert m in sizes and n <= m <= cap, (n, m)
        assert m == cap or m <= max(MIN_BUCKET, 2 * n - 1), (n, m)  # the smallest that holds n
    for n in (0, cap + 1):
        with pytest.raises(ValueError, match=f"unsure set of {n} images: must be 1 to the cap"):
            bucket(n, cap)


def _net(seed: int) -> FoldedCifarNet:
    """A small random CIFAR net, BN folded as the evaluation runs it, its BN
    statistics moved off the defaults so that folding changes the convs."""
    torch.manual_seed(seed)
    model = CifarNet(widths=(16, 32, 32))
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    model.head.weight.data.mul_(20.0)  # confidences spread out, so a threshold splits the batch
    return inference_net(model)


def _recording(model: torch.nn.Module, sizes: list[int], inputs: list[torch.Tensor] | None = None):
    def forward(x: torch.Tensor) -> torch.Tensor:
        sizes.append(len(x))
        if inputs is not None:
            inputs.append(x)
        return model(x)
    return forward


def _garbage_pad(t: torch.Tensor, size: int) -> torch.Tensor:
    """The pad poisoned: NaN rows after huge ones, where tta.pad_rows copies a real row."""
    pad = torch.full((size - len(t), *t.shape[1:]), float("nan"), dtype=t.dtype)
    pad[: len(pad) // 2] = 3e4
    return torch.cat([t, pad.contiguous(memory_format=torch.channels_last) if t.ndim == 4 else pad])


# unsure shares that leave an odd count that no bucket is: 15 of 37, 10 of 21, 133 of 333
@pytest.mark.parametrize("seed, n, cap, share", [(0, 37, 37, 0.4), (1, 21, 64, 0.5), (2, 333, 333, 0.4)])
def test_padding_changes_no_row_even_with_a_poisoned_pad(monkeypatch, seed, n, cap, share):
    net = _net(seed)
    gen = torch.Generator().manual_seed(100 + seed)
    x = torch.randn(n, 3, 32, 32, generator=gen).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        conf = net(x).softmax(1).amax(1)
    below = float(conf.quantile(share))
    unsure = int((conf < below).sum())
    assert 0 < unsure < n and bucket(unsure, cap) > unsure
    plain_sizes: list[int] = []
    with torch.no_grad():
        plain = selective_tta_logits(_recording(net, plain_sizes), x, 2, below, cap=cap, pad=False)
    assert plain_sizes == [n, 5 * unsure]  # unpadded: the views' batch is the data's count
    monkeypatch.setattr(tta, "pad_rows", _garbage_pad)
    sizes: list[int] = []
    inputs: list[torch.Tensor] = []
    with torch.no_grad():
        padded = selective_tta_logits(_recording(net, sizes, inputs), x, 2, below, cap=cap, pad=True)
    assert sizes == [n, 5 * bucket(unsure, cap)]
    assert inputs[1].isnan().any()  # the poison reached the net
    assert padded.isfinite().all()
    # Each row's convs, pools and head are its own (BN folded): the pad can change no row. The
    # batch size may change how oneDNN blocks a conv's sums, so a few ulps, not bits.
    torch.testing.assert_close(padded, plain, rtol=1e-5, atol=1e-6)
    assert torch.equal(padded.argmax(1), plain.argmax(1))


def test_the_cpu_does_not_pad_unless_asked():
    net = _net(3)
    x = torch.randn(29, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    sizes: list[int] = []
    with torch.no_grad():
        conf = net(x).softmax(1).amax(1)
        below = float(conf.quantile(0.5))
        selective_tta_logits(_recording(net, sizes), x, 2, below, cap=64)
    assert sizes == [29, 5 * int((conf < below).sum())]
    assert tta.PAD_DEVICES == {"cuda"}


def _evaluation_shapes(model, images: torch.Tensor, view_batch: int, cap: int, level: int,
                       below: float) -> set[int]:
    """The batch sizes the model meets in a padded evaluation pass over ``images``."""
    sizes: list[int] = []
    with torch.no_grad():
        selective_tta_pass(_recording(model, sizes), images, level, below, view_batch, cap, pad=True)
    return set(sizes)


@pytest.mark.parametrize("n, view_batch, cap, level", [(100, 70, 40, 2), (100, 100, 50, 1), (7, 40, 40, 2),
                                                       (333, 2000, 333, 2), (100, 30, 30, 0)])
def test_the_warm_up_runs_every_shape_an_evaluation_can_meet(n, view_batch, cap, level):
    w = torch.randn(3 * 4 * 4, 10) * 0.5  # confidences well below 1 (at 1, every image takes every view)
    images = torch.randn(n, 3, 4, 4)

    def model(v: torch.Tensor) -> torch.Tensor:  # a row's logits are its own, as in the folded net
        return v.flatten(1) @ w

    warmed: list[int] = []
    warm_up_selective_pass(_recording(model, warmed), images, level, 0.9, view_batch, cap, pad=True)
    views = len(tta.TTA_WEIGHTS[level]) - 1
    if level:
        last = n % view_batch if n > view_batch else 0
        expected = {min(n, view_batch), *([last] if last else []), *(views * m for m in bucket_sizes(cap))}
    else:
        expected = {min(n, cap), *([n % cap] if n > cap and n % cap else [])}
    assert expected <= set(warmed)
    # whichever images are unsure (none, a few, all), the evaluation meets no shape the warm-up missed
    with torch.no_grad():
        conf = (images.flatten(1) @ w).softmax(1).amax(1)
    for below in [0.0, *conf.quantile(torch.tensor([0.1, 0.35, 0.5, 0.9])).tolist(), 0.999999]:
        assert _evaluation_shapes(model, images, view_batch, cap, level, below) <= set(warmed), below


@pytest.mark.parametrize("pad", [False, True])
def test_the_pass_is_the_batched_selective_tta_with_one_read(monkeypatch, pad):
    """The clocked evaluation's pass (one view of all, one read of the unsure
    set, its views in batches of the cap) gives every row the logits of the
    per-batch selective TTA, and reads the host once however many batches."""
    net = _net(4)
    x = torch.randn(130, 3, 32, 32, generator=torch.Generator().manual_seed(8)).contiguous(
        memory_format=torch.channels_last)
    with torch.no_grad():
        below = float(net(x).softmax(1).amax(1).quantile(0.45))
        want = torch.cat([selective_tta_logits(net, x[i:i + 16], 2, below, 16, pad=pad)
                          for i in range(0, 130, 16)])
        reads = []
        nonzero = torch.Tensor.nonzero
        monkeypatch.setattr(torch.Tensor, "nonzero",
                            lambda t, *a, **k: reads.append(1) or nonzero(t, *a, **k))
        got = selective_tta_pass(net, x, 2, below, view_batch=50, cap=16, pad=pad)
    assert len(reads) == 1
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert torch.equal(got.argmax(1), want.argmax(1))


def _warmed_task(monkeypatch, **fields) -> tuple[CifarTask, set[int], list[int]]:
    """A tiny CIFAR task after its throwaway twin's warm-up, padding as on
    CUDA: (the task, the batch sizes the warm-up's forwards met, the list that
    records the sizes every later forward meets)."""
    monkeypatch.setattr(tta, "PAD_DEVICES", frozenset({"cpu", "cuda"}))  # as on CUDA
    seen: list[int] = []
    forward = FoldedCifarNet.forward
    monkeypatch.setattr(FoldedCifarNet, "forward", lambda self, x: seen.append(len(x)) or forward(self, x))
    cfg = Config(subset=64, batch_size=32, eval_subset=100, whiten_images=64, widths=(8, 8, 8), epochs=1,
                 device="cpu", kernels="torch", precision="fp32", data_dir=str(cifar_dir()), download=False,
                 **fields)
    task = cfg.build_task(torch.device("cpu"))
    warm_up_run(lambda c: CifarTask(c, task.data, task.device, task.backend, task.state), task.cfg)
    warmed, seen[:] = set(seen), []
    task.init_model()
    return task, warmed, seen


def test_the_trainers_warm_up_meets_every_shape_of_its_final_evaluation(monkeypatch):
    # 100 test images: one view in a batch of 240 (all 100), the unsure views in batches of 240 // 6 = 40
    task, warmed, seen = _warmed_task(monkeypatch, eval_batch_size=240)
    assert {100, *(5 * m for m in bucket_sizes(40))} <= warmed
    for batch in task.epoch_batches(0):
        task.train_step(*batch)
    for below in (task.cfg.tta_below, 0.3, 0.5):  # the recipe's threshold, and ones that split batches
        task.cfg.tta_below = below
        task.evaluate(tta=True)
        assert seen and set(seen) <= warmed, (below, sorted(set(seen) - warmed))
        seen.clear()


def test_with_one_view_evaluations_the_warm_up_meets_their_shapes_too(monkeypatch):
    # one view: batches of 90 over 100 images (90 and a last one of 10); TTA: 90 // 6 = 15
    task, warmed, seen = _warmed_task(monkeypatch, eval_batch_size=90, eval_every=1)
    task.evaluate(tta=False)  # an intermediate charged evaluation (log_eval_tta off)
    assert set(seen) == {90, 10} and set(seen) <= warmed, sorted(set(seen) - warmed)
