"""Nsight Compute CSV exports: measured DRAM bytes, FLOPs and time per kernel.

Record with (the metrics the tool reads; docs/ROOFLINE.md)::

    ncu --csv --page raw --metrics gpu__time_duration.sum,dram__bytes_read.sum,\\
dram__bytes_write.sum,sm__sass_thread_inst_executed_op_fadd_pred_on.sum,\\
sm__sass_thread_inst_executed_op_fmul_pred_on.sum,\\
sm__sass_thread_inst_executed_op_ffma_pred_on.sum,... python train.py > kernels.csv

Both layouts that ``ncu --csv`` writes are read: ``--page raw`` (one row per
kernel, one column per metric, a second row of units) and ``--page details``
(one row per kernel and metric, with ``Metric Name``/``Metric Unit``/
``Metric Value`` columns). Values may carry thousands separators.

FLOPs: CUDA-core instructions ``sm__sass_thread_inst_executed_op_{h,f,d}
{add,mul,fma}_pred_on.sum`` (an FMA counts 2) plus tensor-core math ops
``sm__ops_path_tensor_src_*_dst_*`` (taken as FLOPs, as Nsight Compute's
roofline does). A kernel without any FLOP metric has ``flops`` None.
Note that ncu locks clocks to base by default: its times are slower than an
unprofiled run's.
"""

from __future__ import annotations

import csv
import io
import pathlib
import re
from dataclasses import dataclass

_TIME_UNITS = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3,
               "ms": 1e-3, "second": 1.0, "s": 1.0}
_BYTE_UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
               "kibyte": 2**10, "mibyte": 2**20, "gibyte": 2**30}
_COUNT_UNITS = {"": 1, "inst": 1, "(!)": 1, "k": 1e3, "m": 1e6, "g": 1e9}

_SASS_FLOP = re.compile(r"^sm__sass_thread_inst_executed_op_([hfd])(add|mul|fma)_pred_on\.sum$")
_TENSOR_OPS = re.compile(r"^sm__ops_path_tensor_src_\w+\.sum$|^sm__ops_path_tensor_src_\w+$")


@dataclass
class NcuKernel:
    id: str
    name: str
    time_s: float | None
    dram_bytes: float
    flops: float | None


class NcuError(ValueError):
    """The file is not an Nsight Compute CSV export this tool can read."""


def _number(text: str) -> float | None:
    t = (text or "").strip().replace(",", "")
    if t in ("", "n/a", "N/A", "-"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def _scale(unit: str, metric: str) -> float:
    u = (unit or "").strip().lower()
    if metric.startswith("gpu__time_duration"):
        return _TIME_UNITS.get(u, 1e-9)
    if metric.startswith("dram__bytes"):
        return _BYTE_UNITS.get(u, 1.0)
    return _COUNT_UNITS.get(u, 1.0)


def _rows(text: str) -> list[list[str]]:
    # ncu prints "==PROF==" log lines before the CSV: start at the header
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"') or ln.startswith("ID,")),
                 None)
    if start is None:
        raise NcuError("no CSV header starting with \"ID\" found; export with "
                       "`ncu --csv --page raw --metrics ...` (see docs/ROOFLINE.md)")
    return list(csv.reader(io.StringIO("\n".join(lines[start:]))))


def parse_ncu_csv(source: str | pathlib.Path) -> list[NcuKernel]:
    """Read an ``ncu --csv`` export (raw or details page) from a path or text."""
    if isinstance(source, pathlib.Path) or (isinstance(source, str) and "\n" not in source):
        p = pathlib.Path(source)
        if not p.exists():
            raise NcuError(f"--ncu {p}: no such file; pass the CSV written by ncu --csv")
        text = p.read_text(encoding="utf-8", errors="replace")
    else:
        text = source
    rows = _rows(text)
    header = rows[0]
    if "Metric Name" in header:
        metrics = _from_details(header, rows[1:])
    else:
        metrics = _from_raw(header, rows[1:])
    return [_kernel(kid, name, m) for (kid, name), m in metrics.items()]


def _from_raw(header: list[str], body: list[list[str]]) -> dict[tuple[str, str], dict]:
    col = {h: i for i, h in enumerate(header)}
    if "Kernel Name" not in col:
        raise NcuError("the CSV has no 'Kernel Name' column; is it an ncu --csv export?")
    units = ["" for _ in header]
    if body and body[0] and body[0][col["ID"]].strip() == "":
        units, body = body[0], body[1:]  # the units row under the header
    metric_cols = [h for h in header if "__" in h]
    out: dict[tuple[str, str], dict] = {}
    for r in body:
        if len(r) < len(header):
            continue
        key = (r[col["ID"]], r[col["Kernel Name"]])
        m = out.setdefault(key, {})
        for h in metric_cols:
            v = _number(r[col[h]])
            if v is not None:
                m[h] = v * _scale(units[col[h]], h)
    return out


def _from_details(header: list[str], body: list[list[str]]) -> dict[tuple[str, str], dict]:
    col = {h: i for i, h in enumerate(header)}
    for need in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"):
        if need not in col:
            raise NcuError(f"the CSV has no {need!r} column; export with ncu --csv")
    out: dict[tuple[str, str], dict] = {}
    for r in body:
        if len(r) < len(header):
            continue
        name = r[col["Metric Name"]]
        v = _number(r[col["Metric Value"]])
        m = out.setdefault((r[col["ID"]], r[col["Kernel Name"]]), {})
        if v is not None:
            m[name] = v * _scale(r[col["Metric Unit"]], name)
    return out


def _kernel(kid: str, name: str, m: dict) -> NcuKernel:
    time_s = m.get("gpu__time_duration.sum")
    nbytes = m.get("dram__bytes_read.sum", 0.0) + m.get("dram__bytes_write.sum", 0.0)
    if "dram__bytes.sum" in m and not nbytes:
        nbytes = m["dram__bytes.sum"]
    flops = None
    for metric, v in m.items():
        sass = _SASS_FLOP.match(metric)
        if sass:
            flops = (flops or 0.0) + v * (2 if sass.group(2) == "fma" else 1)
        elif _TENSOR_OPS.match(metric) and "sparsity" not in metric:
            flops = (flops or 0.0) + v
    return NcuKernel(kid, name, time_s, nbytes, flops)
