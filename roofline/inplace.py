"""Op times measured in place, without the profiler: every op that reaches
the dispatcher inside ``with InplaceCapture(...)`` is timed by a clock read
before and after it (a ``TorchDispatchMode``), and the calls are written as a
profiler-format trace (``cpu_op`` events with ``Input Dims``, ``Input type``
and ``Concrete Inputs``), so the whole report set reads it unchanged.

Why: on the CPU the profiler's own work changed some ops' times 2-3x in the
CIFAR step (the 24->64 @31 conv forward 194-339 ms a call under it against 90
in place; the pool + BN + act backward at 64 channels 61 against 21 ms:
docs/ROOFLINE.md), so op shares from a profiled step misled which kernel to
work on. Here each op runs exactly as in training; the timer's own cost (a
few microseconds a call) falls between ops, where the report counts it as
overhead outside ops, not inside them.

What it sees: the ops below autograd (``aten::convolution``, not
``aten::conv2d``; our ``dawnbench::*`` custom ops whole), one level, no
nesting. CPU only: CUDA kernels run asynchronously, so a host clock around a
launch does not time the kernel (the profiler's device time does).
"""

from __future__ import annotations

import json
import os
import pathlib
import threading
import time

from torch.utils._python_dispatch import TorchDispatchMode

from dawnbench_fast.roofline.capture import Capture
from dawnbench_fast.roofline.flop_formulas import trace_style_args
from dawnbench_fast.roofline.trace import INPLACE_TIMER, TIMER_KEY


class _OpTimer(TorchDispatchMode):
    """Times each op call and keeps it as ``calls`` (below)."""

    def __init__(self, t0: float):
        super().__init__()
        self.t0 = t0
        # (start s, duration s, op name, Input Dims, Input type, Concrete Inputs)
        self.calls: list[tuple[float, float, str, list, list, list]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        start = time.perf_counter()
        out = func(*args, **kwargs)
        end = time.perf_counter()
        # shapes are read after the clock stops; tensors only as shapes, so
        # nothing a step frees is kept alive
        dims, types_, concrete = trace_style_args(func._schema, args, kwargs)
        self.calls.append((start - self.t0, end - start, func._schema.name, dims, types_, concrete))
        return out


class InplaceCapture(Capture):
    """:class:`~dawnbench_fast.roofline.capture.Capture` with op times taken in
    place (module docstring); ``report()`` and ``trace_path`` as there."""

    def __enter__(self) -> InplaceCapture:
        if self.device is not None and str(self.device).startswith("cuda"):
            raise ValueError("the in-place timer times CPU ops only; on a GPU use the profiler "
                             "(--profile-timer profiler)")
        self._t0 = time.perf_counter()
        self._timer = _OpTimer(self._t0)
        self._timer.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.__exit__(*exc)
        self.wall_s = time.perf_counter() - self._t0
        if exc[0] is not None:
            return
        pid, tid = os.getpid(), threading.get_ident()
        events = [{"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": tid,
                   "ts": start * 1e6, "dur": dur * 1e6,
                   "args": {"Input Dims": dims, "Input type": types_, "Concrete Inputs": concrete}}
                  for start, dur, name, dims, types_, concrete in self._timer.calls]
        path = self._given_path or pathlib.Path(f"roofline_trace_{pid}.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps({TIMER_KEY: INPLACE_TIMER, "traceEvents": events}))
        tmp.replace(path)
        self.trace_path = path


def inplace_capture(trace_path: str | pathlib.Path | None = None, steps: int | None = None) -> InplaceCapture:
    """Context manager timing every CPU op in place; ``.report(...)`` afterwards."""
    return InplaceCapture(None, trace_path, steps)
