"""CIFAR-10's evaluation: the trained net with BN folded into its convs, its
top-1 over the test set with the recipe's test-time augmentation
(dawnbench_fast.cifar.tta), and the warm-up that runs every shape of that
evaluation once, outside the clock. dawnbench_fast.cifar, whose Trainer
calls these, re-exports ``evaluate`` and ``inference_net``.
"""

from __future__ import annotations

import torch

from dawnbench_fast.cifar.recipe import CifarRecipe
from dawnbench_fast.cifar.tta import eval_batch, selective_tta_pass, warm_up_selective_pass
from dawnbench_fast.data.cifar10_device import DeviceData
from dawnbench_fast.execution.distributed import world
from dawnbench_fast.execution.runtime import autocast, compute_dtype
from dawnbench_fast.models.cifar_net import CifarNet, FoldedCifarNet
from dawnbench_fast.training.train import accuracy


def inference_net(model: CifarNet, into: FoldedCifarNet | None = None,
                  precision: str = "fp32") -> FoldedCifarNet:
    """The trained net with BN folded into the convs, for evaluation and
    latency under ``precision``'s autocast, its folded convs in the dtype that
    computes in; folded ``into`` a net folded from ``model`` before, its convs
    rewritten in place (no allocation: the evaluation on the clock reads the
    same tensors every time)."""
    model.eval()
    if into is not None and into.source is model:
        return into.refold(model)
    dtype = compute_dtype(precision, model.head.weight.device)
    return FoldedCifarNet(model, dtype).to(memory_format=torch.channels_last)


def one_view_batch(cfg: CifarRecipe) -> int:
    """Images per forward of the evaluation's one-view pass: a whole
    evaluation batch of single views."""
    return cfg.eval_batch_size


@torch.no_grad()
def evaluate(
    model: torch.nn.Module, data: DeviceData, cfg: CifarRecipe, device: torch.device, tta_level: int,
    max_batches: int | None = None,
) -> float:
    """Top-1 accuracy on the (sub)set of test images (BN folded first); with
    ``max_batches``, on that many evaluation batches' images only. One view
    of every image in a few large batches, then the views of the unsure set,
    found with one read (tta.selective_tta_pass; on CUDA padded to a few
    fixed sizes); the counts stay on the device and are read once. In a
    torchrun job each rank evaluates its shard and the counts are summed."""
    if isinstance(model, CifarNet):
        model = inference_net(model, precision=cfg.precision)
    cap = eval_batch(cfg.eval_batch_size, tta_level)
    shard = world().shard(len(data.test_x))
    images, labels = data.test_x[shard], data.test_labels[shard]
    if max_batches is not None:
        images, labels = images[: max_batches * cap], labels[: max_batches * cap]
    with autocast(cfg.precision, device):
        top1, _ = accuracy(lambda x: selective_tta_pass(model, x, tta_level, cfg.tta_below,
                                                        one_view_batch(cfg), cap,
                                                        shift_below=cfg.tta_shift_below),
                           [(images, labels)])
    return top1


@torch.no_grad()
def warm_up(model: torch.nn.Module, data: DeviceData, cfg: CifarRecipe, device: torch.device,
            tta_level: int) -> None:
    """Every input shape that :func:`evaluate` at ``tta_level`` can meet on
    this rank's shard, run once (tta.warm_up_selective_pass): the one-view
    batches and, on CUDA, each padded size of the unsure set, so that cuDNN
    autotunes them in the warm-up, not in the final evaluation."""
    if isinstance(model, CifarNet):
        model = inference_net(model, precision=cfg.precision)
    images = data.test_x[world().shard(len(data.test_x))]
    with autocast(cfg.precision, device):
        warm_up_selective_pass(model, images, tta_level, cfg.tta_below, one_view_batch(cfg),
                               eval_batch(cfg.eval_batch_size, tta_level), shift_below=cfg.tta_shift_below)
