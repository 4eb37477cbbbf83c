"""The live API: profile a callable and report on it.

    from dawnbench_fast import roofline
    with roofline.capture() as cap:
        step()
    rep = cap.report(out_dir="roofline_out")   # also prints nothing; see rep.totals

    roofline.profile_training(step, steps=3, out_dir="prof")  # trace + report set
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable

from dawnbench_fast import atomic
from dawnbench_fast.roofline.capture import Capture
from dawnbench_fast.roofline.inplace import InplaceCapture
from dawnbench_fast.roofline.outputs import write_report_set
from dawnbench_fast.roofline.timeline import Timeline, timeline
from dawnbench_fast.roofline.trace import load_trace

TIMERS = ("profiler", "inplace")  # how profile_training times the ops


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
    if timer == "profiler":
        write_timeline(out, steps)
    return out


def write_timeline(out: pathlib.Path, steps: int) -> Timeline | None:
    """The device timeline of ``out``'s trace.json (timeline.py), written
    beside the report as timeline.json and timeline.txt and printed; None,
    and nothing written, where the trace holds no device activity."""
    line = timeline(load_trace(out / "trace.json"), steps)
    if line is not None:
        atomic.write_text(out / "timeline.json", json.dumps(line.to_dict(), indent=1))
        atomic.write_text(out / "timeline.txt", line.text())
        print(line.text(), end="")
    return line
