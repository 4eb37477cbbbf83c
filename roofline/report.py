"""The roofline report: per-op rows (grouped by op name, input shapes and
dtypes), totals, the uncounted list and the overhead list, against a device's
peaks. Rendering lives in :mod:`text_report`, :mod:`plot`, :mod:`html_report`.

Per row: time, share of counted+uncounted op time, FLOPs, minimal bytes (and
measured bytes/FLOPs where Nsight Compute data exists), intensity
(FLOPs / byte), achieved FLOP/s and bytes/s, the attainable roof at that
intensity (min(compute peak, intensity x bandwidth)), the achieved share of
it, and the bound (memory when the intensity is below the ridge point
peak / bandwidth, else compute). The compute roof of a matmul/conv op is its
precision's (bf16 GEMMs on the bf16 roof); every other op is held to the fp32
(vector) roof.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from dawnbench_fast.roofline import registry
from dawnbench_fast.roofline.analysis import Attribution, Unit, attribute, display_name
from dawnbench_fast.roofline.ncu import NcuKernel
from dawnbench_fast.roofline.peak_choice import resolve_peaks
from dawnbench_fast.roofline.peaks import Peaks
from dawnbench_fast.roofline.trace import Trace, load_trace, short_kernel_name
from dawnbench_fast.roofline.trace_args import precision_of
from dawnbench_fast.vocabulary import DTYPE_BYTES

CONVENTIONS = (
    "FLOP = 2 x multiply-accumulate (a fused multiply-add is 2 FLOPs); matmul/conv bias adds "
    "are not counted as FLOPs. Bytes = minimal DRAM traffic: each tensor input read once and "
    "each output written once (a lower bound), unless marked measured (Nsight Compute)."
)


@dataclass
class Row:
    op: str
    shapes: str
    dtypes: str
    precision: str
    matmul: bool
    calls: int = 0
    time_us: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    matmul_flops: float = 0.0  # the part of flops in the matmul/conv subtotal
    measured_flops: float | None = None
    measured_bytes: float | None = None
    kernels: list[str] = field(default_factory=list)
    # filled by finish()
    share: float = 0.0
    intensity: float | None = None
    flops_per_s: float = 0.0
    bytes_per_s: float = 0.0
    roof_precision: str = "fp32"
    roof_flops_per_s: float = 0.0
    pct_of_roof: float = 0.0
    bound: str = "memory"

    def finish(self, peaks: Peaks, total_time_us: float) -> None:
        t = self.time_us * 1e-6
        flops = self.measured_flops if self.measured_flops is not None else self.flops
        nbytes = self.measured_bytes if self.measured_bytes is not None else self.bytes
        self.share = self.time_us / total_time_us if total_time_us else 0.0
        self.intensity = flops / nbytes if nbytes else None
        self.flops_per_s = flops / t if t else 0.0
        self.bytes_per_s = nbytes / t if t else 0.0
        self.roof_precision, peak = peaks.roof(self.precision if self.matmul else "fp32")
        self.roof_flops_per_s = peak
        if flops <= 0:
            # pure data movement: held to the bandwidth roof
            self.bound = "memory"
            self.pct_of_roof = self.bytes_per_s / peaks.bandwidth if peaks.bandwidth else 0.0
            return
        ridge = peak / peaks.bandwidth
        attainable = peak if self.intensity is None else min(peak, self.intensity * peaks.bandwidth)
        self.bound = "compute" if self.intensity is None or self.intensity >= ridge else "memory"
        self.pct_of_roof = self.flops_per_s / attainable if attainable else 0.0


@dataclass
class Report:
    source: str
    peaks: Peaks
    time_basis: str  # "host" (CPU op time, profiler), "inplace" (CPU op time, inplace.py) or "device"
    steps: int | None
    rows: list[Row]
    uncounted: list[dict]
    overhead: list[dict]
    kernels: list[dict]
    totals: dict
    warnings: list[str]

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "conventions": CONVENTIONS,
            "time_basis": self.time_basis,
            "steps": self.steps,
            "device": self.peaks.to_dict(),
            "totals": self.totals,
            "rows": [asdict(r) for r in self.rows],
            "uncounted": self.uncounted,
            "overhead": self.overhead,
            "kernels": self.kernels,
            "warnings": self.warnings,
        }

    def write_json(self, path: str | pathlib.Path) -> pathlib.Path:
        p = pathlib.Path(path)
        p.write_text(json.dumps(self.to_dict(), indent=1))
        return p


def _shape_str(shapes: list) -> str:
    parts = []
    for s in shapes:
        if s and isinstance(s[0], list):
            parts.append(f"list[{len(s)}]")
        elif s:
            parts.append("x".join(str(d) for d in s))
    return ", ".join(parts)


def _dtype_str(dtypes: list) -> str:
    short = {"float": "f32", "c10::BFloat16": "bf16", "c10::Half": "f16", "double": "f64",
             "long int": "i64", "int": "i32", "bool": "bool", "unsigned char": "u8"}
    return ",".join(short.get(d, d) for d in dtypes if d in DTYPE_BYTES)


def build_report(
    trace: Trace | str | pathlib.Path,
    peaks: Peaks | None = None,
    *,
    device: str | None = None,
    peaks_file: str | None = None,
    ncu: Iterable[NcuKernel] | None = None,
    steps: int | None = None,
    wall_s: float | None = None,
) -> Report:
    """Count a trace and set it against a device's peaks. ``wall_s``: the
    wall-clock time of the traced region, if known (the live API measures it),
    for a fraction of peak that includes the time between ops."""
    if not isinstance(trace, Trace):
        trace = load_trace(trace)
    if not trace.has_shapes and any(True for _ in trace.ops()):
        # without shapes nothing can be counted: say so instead of reporting
        # a misleading split of the time
        raise ValueError(f"trace {trace.path} has no input shapes; record it with "
                         "torch.profiler.profile(record_shapes=True, ...)")
    if peaks is None:
        peaks = resolve_peaks(device, peaks_file, trace.on_gpu, trace.device_properties)
    attr = attribute(trace)
    return report_from_attribution(attr, peaks, trace.path, ncu=ncu, steps=steps, wall_s=wall_s,
                                   timer=trace.timer)


def above_the_roof(rows: list[Row], totals: dict, peaks: Peaks) -> str | None:
    """What to say when the step's matmul/conv work as a whole runs faster
    than its roof: the peaks are too low (a CPU's measured peaks taken on a
    busy machine and kept by the cache; a peaks file or table that
    understates the device), so every ``%roof`` is overstated. One row alone
    may pass its roof honestly: a 3x3 convolution on a 3x3 or 2x2 map is
    counted with the border taps the kernels skip (1.65x and 2.25x the
    products computed), so the check is the whole step's rate."""
    if totals.get("matmul_conv_fraction_of_peak", 0.0) <= 1.0:
        return None
    top = max((r for r in rows if r.matmul), key=lambda r: r.pct_of_roof)  # the total is theirs
    fix = ("measure them again on an idle machine: python -m dawnbench_fast.roofline peaks --refresh"
           if peaks.measured else
           "check the peaks given (--device or --peaks)")
    return (f"the matmul/conv ops together run at {totals['matmul_conv_fraction_of_peak']:.0%} of their roof "
            f"(the highest {top.pct_of_roof:.0%}: {top.op} {top.shapes}): the peaks ({peaks.name}) are "
            f"below what this device reaches, so %roof is overstated; {fix}")


def report_from_attribution(
    attr: Attribution, peaks: Peaks, source: str, *, ncu: Iterable[NcuKernel] | None = None,
    steps: int | None = None, wall_s: float | None = None, timer: str = "profiler",
) -> Report:
    """The report of an attributed trace: one row per (op, shapes, dtypes),
    the uncounted time, the host overhead and the step's totals. ``timer``:
    the trace's (``inplace``: host op times taken without the profiler)."""
    rows, uncounted, counted_units = _rows(attr)
    ncu_by_name = _ncu_means(ncu)
    if ncu_by_name:
        _attach_measured(rows, counted_units, ncu_by_name)

    counted_time = sum(r.time_us for r in rows.values())
    uncounted_time = sum(d["time_us"] for d in uncounted.values())
    op_time = counted_time + uncounted_time
    for r in rows.values():
        r.finish(peaks, op_time)
    row_list = sorted(rows.values(), key=lambda r: -r.time_us)
    unc_list = sorted(uncounted.values(), key=lambda d: -d["time_us"])
    for d in unc_list:
        d["share"] = d["time_us"] / op_time if op_time else 0.0
    ovh_list = sorted(
        ({"name": n, "time_us": t} for n, t in attr.overhead.items() if t > 0),
        key=lambda d: -d["time_us"],
    )
    kernels = _kernel_rows(attr) if attr.on_gpu else []
    totals = _totals(row_list, peaks, counted_time, uncounted_time, steps, wall_s)
    totals["overhead_time_us"] = sum(d["time_us"] for d in ovh_list)
    warnings = []
    if not attr.has_shapes:
        warnings.append("the trace has no input shapes: record it with "
                        "torch.profiler.profile(record_shapes=True)")
    if above := above_the_roof(row_list, totals, peaks):
        warnings.append(above)
    basis = "device" if attr.on_gpu else ("inplace" if timer == "inplace" else "host")
    return Report(source, peaks, basis, steps, row_list, unc_list, ovh_list, kernels, totals, warnings)


TIME_BASES = {"device": "GPU kernel time", "host": "host op time (profiler)",
              "inplace": "host op time, timed in place (no profiler)"}


def time_basis_label(rep: Report) -> str:
    """How the report's op times were taken, in words."""
    return TIME_BASES.get(rep.time_basis, rep.time_basis)


def timing_tool(rep: Report) -> str:
    """What was on while the report's region ran: the in-place timer or the profiler."""
    return "timer" if rep.time_basis == "inplace" else "profiler"


def _rows(attr: Attribution) -> tuple[dict[tuple, Row], dict[str, dict], list[Unit]]:
    """Counted units summed into rows keyed by (op, shapes, dtypes); the
    uncounted ops and unlinked kernels by name; the counted units."""
    rows: dict[tuple, Row] = {}
    uncounted: dict[str, dict] = {}
    counted_units: list[Unit] = []
    for u in attr.units:
        if not u.counted:
            d = uncounted.setdefault(display_name(u.op.name), {"name": display_name(u.op.name),
                                                               "calls": 0, "time_us": 0.0})
            d["calls"] += 1
            d["time_us"] += u.time_us
            continue
        counted_units.append(u)
        if attr.on_gpu and not u.kernels:
            # launched nothing on the device (views, allocations, CPU-side
            # tensors): no device time, and its FLOPs were not the device's
            continue
        key = (u.op.name, json.dumps(u.op.shapes), json.dumps(u.op.dtypes))
        row = rows.get(key)
        if row is None:
            row = rows[key] = Row(
                op=u.op.name,
                shapes=_shape_str(u.op.shapes),
                dtypes=_dtype_str(u.op.dtypes),
                precision=precision_of(u.op.dtypes),
                matmul=registry.is_matmul(u.op.name),
            )
        row.calls += 1
        row.time_us += u.time_us
        row.flops += u.flops
        row.bytes += u.bytes
        row.matmul_flops += u.matmul_flops
        for k in u.kernels:
            if k.name not in row.kernels:
                row.kernels.append(k.name)
    for k in attr.unlinked_kernels:
        name = f"[kernel] {k.name}"
        d = uncounted.setdefault(name, {"name": name, "calls": 0, "time_us": 0.0})
        d["calls"] += 1
        d["time_us"] += k.dur
    return rows, uncounted, counted_units


def _totals(
    row_list: list[Row], peaks: Peaks, counted_time: float, uncounted_time: float,
    steps: int | None, wall_s: float | None,
) -> dict:
    """The step's totals (all but the overhead time, which the caller adds)."""
    op_time = counted_time + uncounted_time
    flops = sum(r.flops for r in row_list)
    nbytes = sum(r.bytes for r in row_list)
    mm_flops = sum(r.matmul_flops for r in row_list)
    mm_time = sum(r.time_us for r in row_list if r.matmul)
    # the step's dominant precision: that of most matmul/conv FLOPs
    by_prec: dict[str, float] = {}
    for r in row_list:
        if r.matmul:
            by_prec[r.precision] = by_prec.get(r.precision, 0.0) + r.flops
    main_prec = max(by_prec, key=by_prec.get) if by_prec else "fp32"
    roof_prec, main_peak = peaks.roof(main_prec)
    t_s = op_time * 1e-6
    totals = {
        "op_time_us": op_time,
        "counted_time_us": counted_time,
        "uncounted_time_us": uncounted_time,
        "coverage": counted_time / op_time if op_time else 0.0,
        "overhead_time_us": 0.0,
        "flops": flops,
        "matmul_conv_flops": mm_flops,
        "other_flops": flops - mm_flops,
        "bytes": nbytes,
        "matmul_conv_time_us": mm_time,
        "flops_per_s": flops / t_s if t_s else 0.0,
        "matmul_conv_flops_per_s": mm_flops / (mm_time * 1e-6) if mm_time else 0.0,
        "bytes_per_s": nbytes / t_s if t_s else 0.0,
        "main_precision": roof_prec,
        "main_peak_flops_per_s": main_peak,
        "fraction_of_peak": (flops / t_s) / main_peak if t_s and main_peak else 0.0,
        "matmul_conv_fraction_of_peak": (mm_flops / (mm_time * 1e-6)) / main_peak
        if mm_time and main_peak else 0.0,
        "bandwidth_bytes_per_s": peaks.bandwidth,
    }
    if wall_s:
        totals["wall_time_us"] = wall_s * 1e6
        totals["wall_flops_per_s"] = flops / wall_s
        totals["wall_fraction_of_peak"] = flops / wall_s / main_peak if main_peak else 0.0
    if steps:
        totals["steps"] = steps
        totals["flops_per_step"] = flops / steps
        totals["matmul_conv_flops_per_step"] = mm_flops / steps
        totals["op_time_per_step_us"] = op_time / steps
        if wall_s:
            totals["wall_time_per_step_us"] = wall_s * 1e6 / steps
    return totals


def _kernel_rows(attr: Attribution) -> list[dict]:
    out: dict[str, dict] = {}
    for u in attr.units:
        for k in u.kernels:
            d = out.setdefault(k.name, {"kernel": k.name, "op": u.op.name, "calls": 0,
                                        "time_us": 0.0})
            d["calls"] += 1
            d["time_us"] += k.dur
    for k in attr.unlinked_kernels:
        d = out.setdefault(k.name, {"kernel": k.name, "op": None, "calls": 0, "time_us": 0.0})
        d["calls"] += 1
        d["time_us"] += k.dur
    return sorted(out.values(), key=lambda d: -d["time_us"])


def _ncu_means(ncu: Iterable[NcuKernel] | None) -> dict[str, tuple[float, float | None]]:
    """Kernel name -> (mean measured bytes, mean measured FLOPs) per launch."""
    if not ncu:
        return {}
    acc: dict[str, list] = {}
    for k in ncu:
        a = acc.setdefault(k.name, [0, 0.0, 0.0, True])
        a[0] += 1
        a[1] += k.dram_bytes
        if k.flops is None:
            a[3] = False
        else:
            a[2] += k.flops
    return {n: (b / c, f / c if ok else None) for n, (c, b, f, ok) in acc.items()}


def _attach_measured(rows: dict, units: list[Unit], ncu_by_name: dict) -> None:
    """Measured bytes/FLOPs of a row = sum over its kernel launches of the
    per-launch mean that Nsight Compute measured for that kernel name; left
    unset for a row with any kernel that ncu did not profile."""
    per_row: dict[tuple, list] = {}
    for u in units:
        key = (u.op.name, json.dumps(u.op.shapes), json.dumps(u.op.dtypes))
        acc = per_row.setdefault(key, [0.0, 0.0, True, True])
        for k in u.kernels:
            m = ncu_by_name.get(k.name) or ncu_by_name.get(short_kernel_name(k.name))
            if m is None:
                acc[2] = acc[3] = False
                continue
            acc[0] += m[0]
            if m[1] is None:
                acc[3] = False
            else:
                acc[1] += m[1]
    for key, (b, f, bytes_ok, flops_ok) in per_row.items():
        row = rows.get(key)
        if row is None or not row.kernels:
            continue
        if bytes_ok:
            row.measured_bytes = b
        if flops_ok:
            row.measured_flops = f
