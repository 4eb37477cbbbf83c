"""Which peaks a report uses: a user file, a named device, the GPU of the
trace or of this machine, else this CPU's measured peaks. Apart from
:mod:`peaks` so that :mod:`cpu_peaks` (which builds a ``Peaks``) and the
GPU table import in one direction only."""

from __future__ import annotations

from dawnbench_fast.roofline import cpu_peaks  # the module: tests replace cpu_peaks.cpu_peaks
from dawnbench_fast.roofline.peaks import (
    Peaks,
    at_measured_clock,
    detect_gpu,
    load_peaks_file,
    match_gpu,
    table_entry,
)


def resolve_peaks(device: str | None = None, peaks_file: str | None = None,
                  on_gpu: bool = False, trace_devices: list | None = None) -> Peaks:
    """Pick the peaks for a report: an override file first, then ``device``
    (a table name or ``"cpu"``: as tabled), then the GPU named in the trace,
    then the GPU of this machine (both scaled to the maximum SM clock NVML
    measures for that GPU here), else this CPU's measured peaks."""
    if peaks_file:
        return load_peaks_file(peaks_file)
    if device:
        if device.lower().split(":")[0] == "cpu":
            return cpu_peaks.cpu_peaks()
        return table_entry(device)
    if on_gpu:
        for props in trace_devices or []:
            name = str(props.get("name", ""))
            p = match_gpu(name)
            if p is not None:
                return at_measured_clock(p, name)
        p = detect_gpu()
        if p is not None:
            return p
        raise ValueError("the trace holds GPU kernels but names no GPU in the peak table; "
                         "pass --device NAME or --peaks FILE")
    return cpu_peaks.cpu_peaks()
