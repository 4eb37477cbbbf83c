"""The training step as a captured graph replays it (issue 45): its inputs
copied into static buffers on the device before each step, the body reading
only those buffers and the task's persistent state (the net, the optimiser
buffers, the rate table and the step counter of cifar.train_state).

On a GPU the body is what a CUDA graph records once per variant
(cifar.capture_plan) and replays. On the CPU it runs eagerly, which is how
the protocol is tested without a GPU: the same trajectory as the eager step,
bit for bit, with every buffer at the same address from step to step
(tests/cifar/test_static_step.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dawnbench_fast.training.task import StepLoss

if TYPE_CHECKING:
    from dawnbench_fast.cifar.task import CifarTask


class StaticStep:
    """A task's step with static inputs: the step's images (a row of the
    epoch's order), the epoch and the step's index in it."""

    def __init__(self, task: CifarTask):
        self.task = task
        share = range(task.batch)[task.share]
        self.idx = torch.zeros(len(share), dtype=torch.int64, device=task.device)
        self.epoch = torch.zeros((), dtype=torch.int64, device=task.device)
        self.index = torch.zeros((), dtype=torch.int64, device=task.device)

    def load(self, idx: torch.Tensor, epoch: int, index: int) -> None:
        """Copy this step's inputs into the static buffers (device to device,
        and two scalar fills: nothing read back)."""
        self.idx.copy_(idx)
        self.epoch.fill_(epoch)
        self.index.fill_(index)

    def body(self, side: int) -> StepLoss:
        """What a graph records: the keyed batch from the static inputs at
        ``side`` px, then the task's step on it."""
        x = self.task.make_batch(self.idx, self.epoch, self.index, side)
        return self.task.train_step(self.idx, x)
