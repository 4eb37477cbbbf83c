"""CIFAR-10's evaluation: the trained net with BN folded into its convs, its
top-1 over the test set with the recipe's test-time augmentation
(dawnbench_fast.cifar.tta), and the warm-up that runs every shape of that
evaluation once, outside the clock. dawnbench_fast.cifar, whose Trainer
calls these, re-exports ``evaluate`` and ``inference_net``.
"""

from __future__ import annotations

from itertools import islice

import torch

from dawnbench_fast.cifar.recipe import CifarRecipe
from dawnbench_fast.cifar.tta import eval_batch, selective_tta_logits, warm_up_selective_tta
from dawnbench_fast.data.cifar10_device import DeviceData
from dawnbench_fast.execution.distributed import world
from dawnbench_fast.execution.runtime import autocast
from dawnbench_fast.models.cifar_net import CifarNet, FoldedCifarNet
from dawnbench_fast.training.train import accuracy, batched


def inference_net(model: CifarNet) -> FoldedCifarNet:
    """The trained net with BN folded into the convs, for evaluation and latency."""
    model.eval()
    return FoldedCifarNet(model).to(memory_format=torch.channels_last)


@torch.no_grad()
def evaluate(
    model: torch.nn.Module, data: DeviceData, cfg: CifarRecipe, device: torch.device, tta_level: int,
    max_batches: int | None = None,
) -> float:
    """Top-1 accuracy on the (sub)set of test images (BN folded first); with
    ``max_batches``, on that many evaluation batches only. In a torchrun job
    each rank evaluates its shard and the counts are summed. On CUDA the
    unsure images' set is padded to a few fixed sizes (tta.selective_tta_logits)."""
    if isinstance(model, CifarNet):
        model = inference_net(model)
    batch = eval_batch(cfg.eval_batch_size, tta_level)
    shard = world().shard(len(data.test_x))
    with autocast(cfg.precision, device):
        top1, _ = accuracy(lambda x: selective_tta_logits(model, x, tta_level, cfg.tta_below, batch),
                           islice(batched(data.test_x[shard], data.test_labels[shard], batch), max_batches))
    return top1


@torch.no_grad()
def warm_up(model: torch.nn.Module, data: DeviceData, cfg: CifarRecipe, device: torch.device,
            tta_level: int) -> None:
    """Every input shape that :func:`evaluate` at ``tta_level`` can meet on
    this rank's shard, run once (tta.warm_up_selective_tta): the full batch,
    the last partial one and, on CUDA, each padded size of the unsure set, so
    that cuDNN autotunes them in the warm-up, not in the final evaluation."""
    if isinstance(model, CifarNet):
        model = inference_net(model)
    images = data.test_x[world().shard(len(data.test_x))]
    with autocast(cfg.precision, device):
        warm_up_selective_tta(model, images, eval_batch(cfg.eval_batch_size, tta_level), tta_level,
                              cfg.tta_below)
