"""A per-kernel roofline report from an Nsight Compute CSV alone (measured
time, DRAM bytes and FLOPs; no trace needed)."""

from __future__ import annotations

from dawnbench_fast.roofline.ncu import NcuKernel
from dawnbench_fast.roofline.peaks import Peaks
from dawnbench_fast.roofline.report import Report, Row


def _precision(name: str) -> str:
    """Guess a kernel's input precision from its name (for the compute roof)."""
    n = name.lower()
    for key, prec in (("bf16", "bf16"), ("bfloat16", "bf16"), ("fp16", "fp16"), ("half", "fp16"),
                      ("f16", "fp16"), ("tf32", "tf32")):
        if key in n:
            return prec
    return "fp32"


def _is_matmul(name: str) -> bool:
    n = name.lower()
    return any(k in n for k in ("gemm", "conv", "mma", "cutlass", "sm90_xmma", "wgrad", "dgrad"))


def ncu_report(kernels: list[NcuKernel], peaks: Peaks, source: str) -> Report:
    """Rows = kernel names (launches summed); time and bytes measured."""
    rows: dict[str, Row] = {}
    missing_time = 0
    for k in kernels:
        if k.time_s is None:
            missing_time += 1
            continue
        r = rows.get(k.name)
        if r is None:
            r = rows[k.name] = Row(op=k.name, shapes="", dtypes="", precision=_precision(k.name),
                                   matmul=_is_matmul(k.name), measured_bytes=0.0,
                                   measured_flops=0.0 if k.flops is not None else None)
            r.kernels.append(k.name)
        r.calls += 1
        r.time_us += k.time_s * 1e6
        r.measured_bytes = (r.measured_bytes or 0.0) + k.dram_bytes
        r.bytes = r.measured_bytes
        if k.flops is not None and r.measured_flops is not None:
            r.measured_flops += k.flops
            r.flops = r.measured_flops
            r.matmul_flops = r.flops if r.matmul else 0.0
        else:
            r.measured_flops = None
    total = sum(r.time_us for r in rows.values())
    for r in rows.values():
        r.finish(peaks, total)
    row_list = sorted(rows.values(), key=lambda r: -r.time_us)
    flops = sum(r.flops for r in row_list)
    mm = sum(r.matmul_flops for r in row_list)
    mm_time = sum(r.time_us for r in row_list if r.matmul)
    prec, peak = peaks.roof("bf16" if any(r.precision in ("bf16", "fp16") for r in row_list)
                            else "fp32")
    t_s = total * 1e-6
    totals = {
        "op_time_us": total, "counted_time_us": total, "uncounted_time_us": 0.0,
        "coverage": 1.0 if total else 0.0, "overhead_time_us": 0.0, "flops": flops,
        "matmul_conv_flops": mm, "other_flops": flops - mm,
        "bytes": sum(r.bytes for r in row_list), "matmul_conv_time_us": mm_time,
        "flops_per_s": flops / t_s if t_s else 0.0,
        "matmul_conv_flops_per_s": mm / (mm_time * 1e-6) if mm_time else 0.0,
        "bytes_per_s": sum(r.bytes for r in row_list) / t_s if t_s else 0.0,
        "main_precision": prec, "main_peak_flops_per_s": peak,
        "fraction_of_peak": flops / t_s / peak if t_s else 0.0,
        "matmul_conv_fraction_of_peak": mm / (mm_time * 1e-6) / peak if mm_time else 0.0,
        "bandwidth_bytes_per_s": peaks.bandwidth,
    }
    warnings = ["times are from Nsight Compute, which locks clocks to base by default"]
    if missing_time:
        warnings.append(f"{missing_time} kernel rows had no gpu__time_duration.sum and were skipped")
    return Report(source, peaks, "device", None, row_list, [], [], [], totals, warnings)
