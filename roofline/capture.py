"""The profiler capture behind the live API (:mod:`live`): every op run
inside ``with Capture(...) as cap:`` recorded with its shapes, then counted
against the device's peaks by ``cap.report()``. The in-place timer
(:mod:`inplace`) is the same object with another clock."""

from __future__ import annotations

import pathlib
import tempfile
import time

from dawnbench_fast.roofline.outputs import write_report_set
from dawnbench_fast.roofline.report import Report, build_report


def _activities(device: str | None) -> list:
    import torch
    from torch.profiler import ProfilerActivity

    acts = [ProfilerActivity.CPU]
    want_cuda = device is None or str(device).startswith("cuda")
    if want_cuda and torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    return acts


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Capture:
    """Records every op run inside ``with capture() as cap:`` (shapes on)."""

    def __init__(self, device: str | None = None, trace_path: str | pathlib.Path | None = None,
                 steps: int | None = None):
        self.device = device
        self.steps = steps
        self._given_path = pathlib.Path(trace_path) if trace_path else None
        self.trace_path: pathlib.Path | None = None
        self.wall_s: float | None = None  # wall time inside the block (profiler on)
        self._prof = None
        self._t0 = 0.0

    def __enter__(self) -> Capture:
        from torch.profiler import profile

        _sync()
        self._prof = profile(activities=_activities(self.device), record_shapes=True)
        self._prof.__enter__()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        _sync()
        self.wall_s = time.perf_counter() - self._t0
        self._prof.__exit__(*exc)
        if exc[0] is not None:
            return
        path = self._given_path
        if path is None:
            fd, name = tempfile.mkstemp(prefix="roofline_trace_", suffix=".json")
            import os

            os.close(fd)
            path = pathlib.Path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._prof.export_chrome_trace(str(path))
        self.trace_path = path

    def report(self, out_dir: str | pathlib.Path | None = None, *, device: str | None = None,
               peaks_file: str | None = None, steps: int | None = None) -> Report:
        """Count the captured trace against the device's peaks (``device`` a
        table name or "cpu"; default: detected). With ``out_dir``, also write
        the full report set there."""
        if self.trace_path is None:
            raise RuntimeError("capture.report(): nothing captured yet; call it after the "
                               "`with roofline.capture() as cap:` block")
        rep = build_report(self.trace_path, device=device, peaks_file=peaks_file,
                           steps=steps if steps is not None else self.steps, wall_s=self.wall_s)
        if out_dir is not None:
            write_report_set(rep, out_dir)
        return rep
