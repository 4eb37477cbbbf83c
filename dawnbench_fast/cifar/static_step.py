"""The training step as a captured graph replays it: its inputs
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
from dawnbench_fast.execution import gpu_defaults


class CifarTask(Protocol):
    """What the static step reads of cifar.task's CifarTask (named here, not
    imported: the task builds its step from this module)."""

    cfg: Any
    data: Any
    device: torch.device
    batch: int
    share: slice
    epoch_steps: list[int]
    warm_up_epochs: tuple[int, ...]
    model: torch.nn.Module
    optimizers: list[torch.optim.Optimizer]
    state: Any  # cifar.train_state.TrainState: the step counter ``step_t``

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


class Replayable(Protocol):
    def replay(self) -> None: ...


Recorder = Callable[[Callable[[], torch.Tensor]], tuple[Replayable, torch.Tensor]]


class CudaRecorder:
    """Records a body as a CUDA graph into one memory pool shared by every
    graph it records: the step's variants are replayed in blocks, in the
    order they were captured, never concurrently, and nothing one graph
    allocates outlives its replay except its output (kept referenced by
    :class:`StepGraphs`), which is what makes one pool safe.

    The body runs :data:`WARM_UPS` times eagerly on the stream the capture
    then records on, as the 2026 CIFAR record does: every lazily made
    resource (cuBLAS's workspace per stream, the allocator's blocks, a
    compiled graph's first-call set-up) exists before the capture, which
    would otherwise make it mid-capture or fail. The capture itself runs
    under :func:`~dawnbench_fast.execution.gpu_defaults.no_recompile`: a
    recompilation there (Dynamo reading the generator's seed is refused
    inside a capture) is a clear error rather than a broken graph."""

    WARM_UPS = 2

    def __init__(self, cuda: Any = None) -> None:
        """``cuda``: the torch.cuda module (tests pass a stand-in that records the calls)."""
        self.cuda = torch.cuda if cuda is None else cuda
        self.pool = self.cuda.graph_pool_handle()
        self.stream = self.cuda.Stream()  # one stream for every warm-up and capture

    def __call__(self, body: Callable[[], torch.Tensor]) -> tuple[Replayable, torch.Tensor]:
        cuda, stream = self.cuda, self.stream
        stream.wait_stream(cuda.current_stream())  # the work queued before (the inputs' loads)
        with cuda.stream(stream):
            for _ in range(self.WARM_UPS):
                body()
        graph = cuda.CUDAGraph()
        with gpu_defaults.no_recompile(), cuda.graph(graph, pool=self.pool, stream=stream):
            out = body()
        cuda.current_stream().wait_stream(stream)
        return graph, out


class CaptureFailed(RuntimeError):
    """A variant's capture or its self-test failed: the run keeps the static
    body, run eagerly, and says why in one line."""


# The self-test's tolerance for a replayed step against the eager body, relative
# to the largest change the eager steps made to each tensor (the loss: to its
# size; a tensor they barely change: to one unit of its last place). A replay
# runs the very kernels the eager body ran, so the two agree bit for bit unless
# an algorithm accumulates in a varying order (cuDNN's and cuBLAS's split
# reductions): a few units of the precision's last place. A capture that froze
# a host value or read a stale tensor is off by the size of a step, orders of
# magnitude more.
SELF_TEST_RTOL = {"fp32": 1e-4, "tf32": 1e-2, "bf16": 2.0 ** -5, "fp16": 2.0 ** -8}


class StepGraphs:
    """The run's static step and, where its plan captures (a CUDA device),
    one graph per variant, recorded by ``recorder`` (:class:`CudaRecorder`;
    tests pass stand-ins that replay without a GPU).

    A variant whose capture or self-test fails drops every graph: the run
    goes on with the static body run eagerly, and ``failed`` (run.json's
    ``step.capture_failed``, the report's step line) says why in one line."""

    def __init__(self, task: CifarTask, plan: CapturePlan, recorder: Recorder | None,
                 self_test: bool = True):
        self.static = StaticStep(task)
        self.plan = plan
        self.recorder = recorder
        self.self_test = self_test
        self.graphs: dict[StepVariant, Replayable] = {}
        self.losses: dict[StepVariant, torch.Tensor] = {}
        self.capture_seconds = 0.0
        self.failed: str | None = None
        self.tested: dict[str, dict] = {}

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
        replay's upload is not on the clock, then checked against the eager
        body (:meth:`check`). Any failure drops every graph (the run keeps
        the eager static body) and is recorded in ``failed``."""
        if self.recorder is None or self.failed is not None:
            return
        t0 = time.perf_counter()
        variant = None
        try:
            for variant in self.plan.variants:
                if variant in self.graphs:
                    continue
                self._load_step(task, variant, 0)
                task.model.train()
                self.graphs[variant], self.losses[variant] = self.recorder(
                    lambda v=variant: self.static.body(task, v))
                self.graphs[variant].replay()
                if self.self_test:
                    got = self.tested[variant.name()] = self.check(task, variant)
                    if not got["passed"]:
                        raise CaptureFailed(f"self-test: the replayed step is {got['worst_relative']:.3g} "
                                            f"(relative) from the eager body, beyond {got['rtol']:.3g} for "
                                            f"{task.cfg.precision}")
            _synchronize(task.device)
        except Exception as e:  # noqa: BLE001 - any failure of a capture falls back, said in one line
            where = f"{variant.name()}: " if variant is not None else ""
            self.failed = where + one_line(e)
            self.graphs.clear()
            self.losses.clear()
            _synchronize(task.device, quiet=True)
        self.capture_seconds += time.perf_counter() - t0

    def check(self, task: CifarTask, variant: StepVariant) -> dict:
        """The self-test: from one saved state, two steps of ``variant`` (the
        second with other inputs and the step counter moved on, so that a
        value frozen at the capture shows) replayed, then the same two run
        eagerly from the same state; the losses and every tensor the step
        changes compared within :data:`SELF_TEST_RTOL` of the precision
        (``passed``; :meth:`capture` fails the capture beyond it). The
        warm-up's state is throwaway: it is left as the eager steps leave it."""
        state = mutable_tensors(task)
        saved = [t.detach().clone() for t in state]
        # the step counter at the variant's first step of a run, not the warm-up's (which may
        # have run past the rate table's end, where a rate frozen at the capture looks right)
        start = sum(task.epoch_steps[:first_epoch_at(task, variant.side)])

        def two_steps(step: Callable[[], torch.Tensor]) -> list[torch.Tensor]:
            with torch.no_grad():
                for t, s in zip(state, saved, strict=True):
                    t.copy_(s)
                task.state.step_t.fill_(start)
            losses = []
            for index in (0, 1):
                self._load_step(task, variant, index)
                losses.append(step().clone())
            return [torch.stack(losses), *(t.detach().clone() for t in state)]

        replayed = two_steps(lambda: (self.graphs[variant].replay(), self.losses[variant])[1])
        eager = two_steps(lambda: self.static.body(task, variant))
        rtol = SELF_TEST_RTOL.get(getattr(task.cfg, "precision", "fp32"), SELF_TEST_RTOL["bf16"])
        worst, bitwise = 0.0, True
        for got, want, before in zip(replayed, eager, [None, *saved], strict=True):
            if torch.equal(got, want):
                continue
            bitwise = False
            # a tensor the steps barely change (or not at all) is measured against its own
            # rounding instead: one unit of its dtype's last place at its largest value
            ulp = torch.finfo(want.dtype).eps if want.is_floating_point() else 1.0
            got, want = got.double(), want.double()
            change = (want - before.double()).abs().max() if before is not None else want.abs().max()
            scale = torch.maximum(change, ulp * want.abs().max())
            err = ((got - want).abs().max() / scale.clamp_min(1e-30)).item()  # off the clock: the warm-up
            worst = max(worst, err) if err == err else float("inf")  # NaN: as far off as can be
        return {"passed": worst <= rtol, "bitwise": bitwise, "worst_relative": worst, "rtol": rtol}

    def _load_step(self, task: CifarTask, variant: StepVariant, index: int) -> None:
        """Step ``index`` of the first epoch at the variant's side, loaded as the seed's loop loads it."""
        epoch = first_epoch_at(task, variant.side)
        rows = task.epoch_rows(epoch)
        self.static.load(rows[index % len(rows)], epoch, index, task.cfg.seed)

    def record(self) -> dict:
        """run.json's ``step``: the plan, and what was captured and how long it
        took; a failed capture: not captured, and why (``capture_failed``)."""
        rec = {**self.plan.record(), "graphs": [v.name() for v in self.graphs],
               "capture_seconds": round(self.capture_seconds, 3),
               "capture_failed": self.failed, "self_test": self.tested or None}
        if self.failed is not None:
            rec.update(captured=False, eager_why=[f"capture failed: {self.failed}"])
        return rec


def mutable_tensors(task: CifarTask) -> list[torch.Tensor]:
    """Every tensor a step writes: the net's parameters and buffers (BN's
    statistics), the optimisers' state and the step counter."""
    out = [*task.model.parameters(), *task.model.buffers()]
    for opt in task.optimizers:
        out += [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    return out + [task.state.step_t]


def one_line(e: BaseException) -> str:
    """An exception as one line: its type and the first line of its message, shortened."""
    first = (str(e).strip().splitlines() or [""])[0]
    line = f"{type(e).__name__}: {first}" if not isinstance(e, CaptureFailed) else first
    return line if len(line) <= 240 else line[:237] + "..."


def _synchronize(device: torch.device, quiet: bool = False) -> None:
    if device.type != "cuda":
        return
    try:
        torch.cuda.synchronize(device)
    except RuntimeError:
        if not quiet:
            raise


def first_epoch_at(task: CifarTask, side: int) -> int:
    """The first epoch of the run whose training side is ``side``: the one of
    the task's ``warm_up_epochs`` (the first epoch of each side) at that side."""
    return next(e for e in task.warm_up_epochs if epoch_side(task.cfg.progressive, e, task.data.side) == side)
