"""The live API: profile a callable and report on it.

    from dawnbench_fast import roofline
    with roofline.capture() as cap:
        step()
    rep = cap.report(out_dir="roofline_out")   # also prints nothing; see rep.totals

    roofline.profile_training(step, steps=3, out_dir="prof")  # trace + report set
"""

from __future__ import annotations

import pathlib
import tempfile
import time
from collections.abc import Callable

from dawnbench_fast.roofline.outputs import write_report_set
from dawnbench_fast.roofline.report import Report, build_report

TIMERS = ("profiler", "inplace")  # how profile_training times the ops


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


def capture(device: str | None = None, trace_path: str | pathlib.Path | None = None,
            steps: int | None = None) -> Capture:
    """Context manager recording a profiler trace with shapes (CPU, plus CUDA
    where available); call ``.report(...)`` on it afterwards."""
    return Capture(device, trace_path, steps)


def profile_training(
    step: Callable[[], object],
    steps: int,
    out_dir: str | pathlib.Path,
    *,
    warmup: int = 1,
    device: str | None = None,
    peaks_file: str | None = None,
    timer: str = "profiler",
) -> pathlib.Path:
    """Run ``step()`` ``warmup`` times, then ``steps`` times under the profiler
    (``timer="profiler"``) or the in-place op timer (``"inplace"``, CPU only:
    roofline/inplace.py); write trace.json and the report set
    (report.txt/.json/.html, roofline.png/.svg) into ``out_dir`` and return
    it. ``device`` names the peaks to use (a GPU table name or "cpu"; default:
    detected)."""
    if steps < 1:
        raise ValueError(f"--profile-steps {steps}: profile at least 1 step")
    if timer not in TIMERS:
        raise ValueError(f"--profile-timer {timer}: choose {' or '.join(TIMERS)}")
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for _ in range(warmup):
        step()
    if timer == "inplace":
        from dawnbench_fast.roofline.inplace import InplaceCapture

        cap_cm: Capture = InplaceCapture(device, out / "trace.json", steps)
    else:
        cap_cm = capture(trace_path=out / "trace.json", steps=steps)
    with cap_cm as cap:
        for _ in range(steps):
            step()
    # a torch device string ("cuda:0") means "detect that GPU"; "cpu" means
    # this CPU's measured peaks; anything else is a peak-table name
    peak_device = None if device is None or str(device).startswith("cuda") else str(device)
    rep = cap.report(device=peak_device, peaks_file=peaks_file, steps=steps)
    write_report_set(rep, out)
    return out
