"""What a recipe provides to the training loop (dawnbench_fast.training.train): its
config (:class:`LoopConfig`, which knows how to build its task) and its
:class:`Task` (build the model, yield an epoch's batches, take one step,
evaluate with or without its test-time augmentation, save and restore its
state), and the small records they hand back.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import torch

from dawnbench_fast.config.overrides import ConfigError

Predict = Callable[[torch.Tensor], torch.Tensor]  # images -> logits


class Splits:
    """Seconds per part of a training step (augment, forward, backward,
    optimizer), summed over a run. Only on the CPU, where reading the clock is
    free; on CUDA it would need a device sync that slows the step, so it is off."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.seconds: dict[str, float] = {}
        self._t = 0.0

    def start(self) -> None:
        if self.enabled:
            self._t = time.perf_counter()

    def mark(self, name: str) -> None:
        if self.enabled:
            now = time.perf_counter()
            self.seconds[name] = self.seconds.get(name, 0.0) + now - self._t
            self._t = now



class Deployed(NamedTuple):
    """What ``Task.predictor`` yields for the one-image latency loop: the
    deployed model, the test images it may time (all of them, or the first
    ones a recipe holds for it) with their labels, so that the loop's own
    predictions are scored, and how many images the whole test set has (the
    batched evaluation's), so that a score over fewer is labelled as such."""

    predict: Predict
    images: torch.Tensor
    labels: torch.Tensor
    test_images: int


@dataclass(frozen=True)
class StepLoss:
    """One step's loss summed over its batch, still on the device: reading it
    (``per_example``) synchronises, so the loop reads it only when it shows it."""

    total: torch.Tensor
    examples: int

    def per_example(self) -> float:
        return self.total.item() / self.examples


@dataclass(frozen=True)
class Evaluation:
    """Test accuracy of one evaluation; ``note`` names its views in the log
    (the CIFAR recipe writes ``tta_level 2``)."""

    top1: float
    top5: float | None
    tta: bool  # test-time augmentation was used
    note: str


def loop_epochs(epochs: float) -> int:
    """Epochs the loop runs for a recipe ``epochs`` long: a fractional length
    (hiverge's 7.63) ends part-way through its last epoch."""
    return math.ceil(round(epochs, 9))


def steps_in(epochs: float, steps_per_epoch: int) -> int:
    """Optimiser steps in ``epochs`` (fractional) epochs: whole steps, rounded up."""
    return math.ceil(round(epochs * steps_per_epoch, 6))


def epoch_steps(epochs: float, whole: Callable[[int], int]) -> list[int]:
    """Steps of each epoch the loop runs for a recipe ``epochs`` long:
    ``whole(e)`` for a whole epoch ``e`` (a pruned epoch has fewer), the
    fractional last epoch cut to its share of them (rounded up).

    An epoch of no step is refused (ConfigError), never run: the loop would
    evaluate and log it as if it had trained (a length of a few billionths of
    an epoch, or a pruned epoch with fewer images than a batch)."""
    n = loop_epochs(epochs)
    if n == 0:
        raise ConfigError(f"--epochs {epochs}: too short for a single training step; pass a longer --epochs")
    full = [whole(e) for e in range(n)]
    steps = [*full[:-1], steps_in(epochs - (n - 1), full[-1])]
    if 0 in full:  # whole(e) itself gave none
        raise ConfigError(f"--epochs {epochs}: epoch {full.index(0) + 1} takes no training step (its images "
                          "make no whole batch); pass a smaller --batch-size (or a lower --set prune)")
    if steps[-1] < 1:
        raise ConfigError(f"--epochs {epochs}: its last, partial epoch ({epochs - (n - 1):.3g} of one) takes "
                          "no training step; pass a whole number of epochs or a longer last one")
    return steps


class LoopConfig(Protocol):
    """The fields of a recipe's config that the loop reads, and its task."""

    epochs: float  # may be fractional: the last epoch stops at the task's total_steps
    eval_every: int  # charged evaluations every N epochs (0: the final one only)
    show_every: int  # display-only evaluations every N epochs, outside the clock (0: none)
    target: float
    log_eval_tta: bool  # TTA in the intermediate charged evaluations too, not only the final one
    seed: int

    def build_task(self, device: torch.device) -> Task:
        """Load the data and build the recipe's task on ``device``."""
        ...


class Task(Protocol):
    """One training run of a recipe, as the loop drives it.

    ``epoch_batches(epoch)`` yields tuples of ``train_step``'s arguments; the
    task keeps its own model, optimisers and step counter."""

    cfg: LoopConfig
    device: torch.device
    epoch_steps: list[int]  # steps of each epoch the loop runs (task.epoch_steps)
    total_steps: int  # sum(epoch_steps)
    splits: Splits  # seconds per part of the step, for the report
    host_read_every: int  # steps between the loop's reads of device values (execution.runtime)
    # The warm-up (train.warm_up) trains two steps of each of these epochs: one
    # per shape the run's steps take (e.g. each side of a resolution curriculum).
    warm_up_epochs: tuple[int, ...]

    def init_model(self) -> None:
        """Build the model from the seed (inside the clock: e.g. whitening)."""
        ...

    def prepare_warm_up(self) -> None:
        """Called on the warm-up's task after ``init_model``: bring into its few
        steps any change of form the step takes part-way through a run (CIFAR's
        whitening bias freezes: a graph of its own when compiled), or record
        what a pre-flight needs (ImageNet's step times). Most tasks: nothing."""
        ...

    def capture_steps(self) -> None:
        """Called on the warm-up's task after its steps: record what the run
        replays (CIFAR's step as CUDA graphs, kept for every seed). Most
        tasks: nothing."""
        ...

    def warm_up_evaluation(self) -> None:
        """Every shape the run's evaluations can meet, run once (at least one
        batch of ``evaluate(tta=True)``)."""
        ...

    def epoch_batches(self, epoch: int) -> Iterator[tuple[Any, ...]]:
        """This epoch's batches, made lazily (their making is timed with the step)."""
        ...

    def train_step(self, *batch: Any) -> StepLoss:
        """One optimisation step; the loss stays on the device (no sync)."""
        ...

    def evaluate(self, tta: bool, max_batches: int | None = None) -> Evaluation:
        """Test accuracy of the current model, with the recipe's TTA or plain."""
        ...

    def state_dict(self) -> dict:
        """Everything a resumed run needs to go on bit for bit from here: model,
        optimisers, step counter, RNG states, kernel choices (tensors and
        plain data only: checkpoints load with ``weights_only``)."""
        ...

    def load_state_dict(self, state: dict) -> None:
        """Rebuild the model and optimisers and restore ``state`` into them."""
        ...

    def predictor(self, tta: bool) -> AbstractContextManager[Deployed]:
        """Context (no grad, the recipe's precision) yielding the deployed
        model's ``predict(images) -> logits`` with the test images and labels,
        for the one-image latency and the accuracy of its predictions."""
        ...
