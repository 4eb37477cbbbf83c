"""The GPU clock and the step without host synchronisation, checked without a
GPU: CUDA's events, streams and pinned copies are replaced by fakes that
record what the code asks of them.

- On CUDA a phase is timed by two CUDA events on the device's stream, and the
  host waits only for the end event (no device-wide synchronisation, none at
  the phase's start).
- The training loop reads device values on the host (the divergence record,
  the progress bar's loss) only every ``host_read_every`` steps.
- Host arrays go to a GPU through pinned memory with a non-blocking copy.
"""

from __future__ import annotations

import numpy as np
import torch
from support.fake_task import FakeConfig, FakeTimer

from dawnbench_fast.data.host_copy import to_device
from dawnbench_fast.execution import runtime
from dawnbench_fast.training import train
from dawnbench_fast.training.task import StepLoss
from dawnbench_fast.training.train import Phases


class FakeEvent:
    """torch.cuda.Event's timing interface, stamped by a fake clock."""

    clock: FakeTimer
    log: list

    def __init__(self, enable_timing: bool = False):
        assert enable_timing
        self.stamp: float | None = None

    def record(self, stream=None) -> None:
        self.stamp = self.clock()
        self.log.append(("record", stream))

    def synchronize(self) -> None:
        self.log.append(("wait", self.stamp))

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.stamp - self.stamp) * 1000.0  # milliseconds, as CUDA's


def _fake_cuda(monkeypatch) -> tuple[FakeTimer, list]:
    clock, log = FakeTimer(), []
    monkeypatch.setattr(FakeEvent, "clock", clock, raising=False)
    monkeypatch.setattr(FakeEvent, "log", log, raising=False)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: f"stream of {device}")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append(("device sync", device)))
    return clock, log


def test_on_cuda_phases_are_timed_by_events_on_the_devices_stream(monkeypatch):
    clock, log = _fake_cuda(monkeypatch)
    phases = Phases(torch.device("cuda:1"))
    assert phases.events
    clock.advance(100.0)  # before the phase: not charged
    with phases.timed("train"):
        assert log == [("record", "stream of cuda:1")]  # the start: an event, the host does not wait
        clock.advance(2.5)
    assert phases.seconds == {"train": 2.5}
    assert log == [("record", "stream of cuda:1"), ("record", "stream of cuda:1"), ("wait", 102.5)]
    with phases.timed("eval"):
        clock.advance(0.25)
    assert phases.clock == 2.75
    assert not any(entry[0] == "device sync" for entry in log)


def test_a_given_timer_or_the_cpu_use_the_host_clock(monkeypatch):
    clock, log = _fake_cuda(monkeypatch)
    phases = Phases(torch.device("cuda:0"), timer=clock)  # tests drive the clock
    assert not phases.events
    with phases.timed("train"):
        clock.advance(1.0)
    assert phases.seconds == {"train": 1.0}
    assert log == [("device sync", torch.device("cuda:0"))] * 2  # host timer: synchronised at both ends
    assert not Phases(torch.device("cpu")).events


def test_the_loop_reads_device_values_only_every_few_steps(monkeypatch):
    reads, shown = [], []
    real = StepLoss.per_example
    monkeypatch.setattr(StepLoss, "per_example", lambda self: reads.append(1) or real(self))
    checks = []
    real_check = train._raise_if_diverged
    monkeypatch.setattr(train, "_raise_if_diverged",
                        lambda bad, loss: checks.append(1) or real_check(bad, loss))

    class Bar:
        def update(self, n: int) -> None:
            shown.append("update")

        def set_postfix(self, **kw) -> None:
            shown.append(kw["loss"])

    task = FakeConfig(steps_per_epoch=12).build_task(torch.device("cpu"))
    task.host_read_every = 4  # as on a GPU's plan, every 4th step
    train.train_epoch(task, 0, Bar())
    assert shown.count("update") == 12  # the bar moves every step
    assert len(reads) == 3 and len(shown) == 12 + 3  # the loss is read and shown at steps 4, 8, 12
    assert len(checks) == 3 + 1  # the divergence record: at those steps, and once at the epoch's end
    monkeypatch.undo()
    assert runtime.host_read_every(torch.device("cpu")) == 1
    assert runtime.host_read_every(torch.device("cuda")) == runtime.FINITE_CHECK_EVERY


def test_host_arrays_reach_a_gpu_through_pinned_memory_without_blocking(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: calls.append("pin") or self)
    real_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        if any(isinstance(a, torch.device) and a.type == "cuda" for a in args):
            calls.append(("copy", kwargs.get("non_blocking", False)))
            return self
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    idx = np.arange(5, dtype=np.int64)
    out = to_device(idx, "cuda:0", torch.int32)
    assert calls == ["pin", ("copy", True)]
    assert out.dtype == torch.int32 and out.tolist() == list(range(5))
    calls.clear()
    on_cpu = to_device(idx, torch.device("cpu"))
    assert calls == [] and on_cpu.dtype == torch.int64 and on_cpu.tolist() == list(range(5))
