"""The training step as a captured graph replays it (issue 45): its inputs
copied into static buffers on the device before each step (the step's row of
the epoch's order, the epoch, the step's index in it and the seed), the
body reading only those buffers and the run's persistent state (the net, the
optimiser buffers, the rate table and the step counter of cifar.train_state,
the data placed once by data.cifar10_device).

:class:`StepGraphs` holds one CUDA graph per variant of the step that the run
needs (cifar.capture_plan), captured in the warm-up, off the clock, into one
memory pool, and replayed by every seed: the graphs belong to the
:class:`~dawnbench_fast.cifar.train_state.TrainState` that the warm-up and the
seeds share, whose tensors each seed's reset rewrites in place. Until a
variant is captured, and on the CPU, its body runs eagerly on the same
buffers: that is how the protocol is tested without a GPU, bit for bit the
eager step's trajectory with every buffer at the same address from step to
step (tests/cifar/test_static_step.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import torch

from dawnbench_fast.cifar.capture_plan import CapturePlan, StepVariant
from dawnbench_fast.data.progressive import epoch_side


class CifarTask(Protocol):
    """What the static step reads of cifar.task's CifarTask (named here, not
    imported: the task builds its step from this module)."""

    cfg: Any
    data: Any
    device: torch.device
    batch: int
    share: slice
    warm_up_epochs: tuple[int, ...]
    model: torch.nn.Module

    def make_batch(self, idx: torch.Tensor, epoch: int | torch.Tensor, i: int | torch.Tensor, side: int,
                   seed: int | torch.Tensor | None = None) -> torch.Tensor: ...

    def device_step(self, idx: torch.Tensor, x: torch.Tensor, whiten_bias_grad: bool) -> torch.Tensor: ...

    def epoch_rows(self, epoch: int) -> torch.Tensor: ...


class StepKey(NamedTuple):
    """What a static step needs beside its images' indices: which step of
    which epoch it is, at which training side (the task's batches carry this
    instead of an augmented batch when the step makes its own)."""

    epoch: int
    index: int
    side: int


class StaticStep:
    """A task's step with static inputs: the step's images (a row of the
    epoch's order), the epoch, the step's index in it and the seed."""

    def __init__(self, task: CifarTask):
        share = range(task.batch)[task.share]
        self.idx = torch.zeros(len(share), dtype=torch.int64, device=task.device)
        self.epoch = torch.zeros((), dtype=torch.int64, device=task.device)
        self.index = torch.zeros((), dtype=torch.int64, device=task.device)
        self.seed = torch.zeros((), dtype=torch.int64, device=task.device)

    def load(self, idx: torch.Tensor, epoch: int, index: int, seed: int) -> None:
        """Copy this step's inputs into the static buffers (device to device,
        and three scalar fills: nothing read back)."""
        self.idx.copy_(idx)
        self.epoch.fill_(epoch)
        self.index.fill_(index)
        self.seed.fill_(seed)

    def body(self, task: CifarTask, variant: StepVariant) -> torch.Tensor:
        """What a graph records: the keyed batch from the static inputs at the
        variant's side, then the step's device work (the summed loss, detached)."""
        x = task.make_batch(self.idx, self.epoch, self.index, variant.side, self.seed)
        return task.device_step(self.idx, x, variant.whiten_bias_grad)


class CudaRecorder:
    """Records a body as a CUDA graph into one memory pool shared by every
    graph it records: the step's variants are replayed in blocks, in the
    order they were captured, never concurrently, and nothing one graph
    allocates outlives its replay except its output (kept referenced by
    :class:`StepGraphs`), which is what makes one pool safe."""

    def __init__(self) -> None:
        self.pool = torch.cuda.graph_pool_handle()

    def __call__(self, body: Callable[[], torch.Tensor]) -> tuple[Replayable, torch.Tensor]:
        # one eager run on a side stream first, as PyTorch's capture protocol asks: the
        # work the capture will record has then run once on a stream other than the default
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            body()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = body()
        return graph, out


class Replayable(Protocol):
    def replay(self) -> None: ...


class StepGraphs:
    """The run's static step and, where its plan captures (a CUDA device),
    one graph per variant, recorded by ``recorder`` (:class:`CudaRecorder`;
    tests pass one that runs the body at each replay, to drive the same
    protocol on the CPU)."""

    def __init__(self, task: CifarTask, plan: CapturePlan,
                 recorder: Callable[[Callable[[], torch.Tensor]], tuple[Replayable, torch.Tensor]] | None):
        self.static = StaticStep(task)
        self.plan = plan
        self.recorder = recorder
        self.graphs: dict[StepVariant, Replayable] = {}
        self.losses: dict[StepVariant, torch.Tensor] = {}
        self.capture_seconds = 0.0

    def run(self, task: CifarTask, variant: StepVariant) -> torch.Tensor:
        """One step of ``variant`` on the loaded inputs: its graph replayed, or
        its body run eagerly where it has none. The loss tensor is the
        graph's own: the next replay of the variant overwrites it."""
        graph = self.graphs.get(variant)
        if graph is None:
            return self.static.body(task, variant)
        graph.replay()
        return self.losses[variant]

    def capture(self, task: CifarTask) -> None:
        """Record every variant of the plan (the warm-up's task, after its
        eager steps have compiled and autotuned each shape; what the warm-up
        does to its throwaway state does not matter): the model's gradients
        are None between steps, so that the backward allocates them inside
        the pool. Each graph is replayed once, here, so that its first
        replay's upload is not on the clock."""
        if self.recorder is None:
            return
        t0 = time.perf_counter()
        for variant in self.plan.variants:
            if variant in self.graphs:
                continue
            epoch = first_epoch_at(task, variant.side)
            self.static.load(task.epoch_rows(epoch)[0], epoch, 0, task.cfg.seed)
            task.model.train()
            self.graphs[variant], self.losses[variant] = self.recorder(
                lambda v=variant: self.static.body(task, v))
            self.graphs[variant].replay()
        if task.device.type == "cuda":
            torch.cuda.synchronize(task.device)
        self.capture_seconds += time.perf_counter() - t0

    def record(self) -> dict:
        """run.json's ``step``: the plan, and what was captured and how long it took."""
        return {**self.plan.record(), "graphs": [v.name() for v in self.graphs],
                "capture_seconds": round(self.capture_seconds, 3)}


def first_epoch_at(task: CifarTask, side: int) -> int:
    """The first epoch of the run whose training side is ``side``: the one of
    the task's ``warm_up_epochs`` (the first epoch of each side) at that side."""
    return next(e for e in task.warm_up_epochs if epoch_side(task.cfg.progressive, e, task.data.side) == side)
