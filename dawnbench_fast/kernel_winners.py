"""``--kernels auto`` on a GPU: each op's measured winner, per GPU model.

The table (``kernel_winners.json`` beside this module, committed) is keyed by
the GPU's name as NVML reports it (``"NVIDIA H100 80GB HBM3"``). The GPU
suite's ops part writes it (``python -m dawnbench_fast.gpu_suite``, ``--winners-out``) from
its medians: for each op, the backend whose summed median over the op's cases
is lowest, torch eager's included, provided every case of that backend ran
and agreed with torch. ``auto`` takes the table's winner on a listed GPU and
torch's op on any other; nothing is timed at start-up, so a run's choice is
known before it starts and recorded in run.json (``dispatch.op_table``'s
``why``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import torch

from dawnbench_fast import atomic

TABLE_PATH = Path(__file__).with_name("kernel_winners.json")
SCHEMA_VERSION = 1
# Backends a GPU table may name: the catalogue's reference and our two GPU faces.
GPU_BACKENDS = ("torch", "triton", "cuda")
# A face whose output differs from torch eager's by more than this (max abs
# error over max abs value, bf16 inputs) is not a candidate, however fast.
MAX_REL_ERR = 0.05


def load_table(path: Path | None = None) -> dict:
    """The winners table (default: the committed one); a missing file is an
    empty table (every GPU unlisted)."""
    path = TABLE_PATH if path is None else path
    if not path.exists():
        return {"schema_version": SCHEMA_VERSION, "gpus": {}}
    table = json.loads(path.read_text())
    if table.get("schema_version") != SCHEMA_VERSION or not isinstance(table.get("gpus"), dict):
        raise ValueError(f"{path}: not a kernel winners table of schema {SCHEMA_VERSION} "
                         "(rewrite it with python -m dawnbench_fast.gpu_suite --only ops --winners-out)")
    return table


def gpu_name(device: torch.device) -> str:
    """The GPU's name as NVML reports it: CUDA's device name is the same
    string ("NVIDIA H100 80GB HBM3"; the suite records NVML's, and
    hardware/gpu_info.py the two), read without NVML so that dispatch, on a
    floor below hardware/, can ask. A placeholder where no GPU is visible
    (dispatch then refuses the GPU backends anyway)."""
    if not torch.cuda.is_available():
        return "(no CUDA device visible)"
    return torch.cuda.get_device_name(device)


def choices(gpu: str, ops: Iterable[str], table: dict) -> tuple[dict[str, str], dict[str, str]]:
    """({op: backend}, {op: why}) for ``gpu``: the table's winner where the GPU
    and op are listed, torch's op elsewhere."""
    entry = table["gpus"].get(gpu)
    listed = ", ".join(sorted(table["gpus"])) or "none yet"
    picked, why = {}, {}
    for op in ops:
        row = (entry or {}).get("ops", {}).get(op)
        if entry is None:
            picked[op], why[op] = "torch", (f"{gpu!r} is not in kernel_winners.json (listed: {listed}): "
                                            "torch's, the reference")
        elif row is None:
            picked[op], why[op] = "torch", f"{op} was not measured on {gpu}: torch's, the reference"
        else:
            picked[op], why[op] = row["winner"], f"measured on {gpu} {entry['measured'][:10]}: {row['why']}"
    return picked, why


def _ms(x: float) -> str:
    return f"{x:.4g} ms"


def op_winner(cases: list[dict]) -> dict:
    """One op's row of the table from the suite's case records of that op
    (each {"case", "impl", "status", "median_ms", "rel_err_vs_torch"})."""
    names = sorted({c["case"] for c in cases})
    totals: dict[str, float] = {}
    rejected: dict[str, str] = {}
    for b in GPU_BACKENDS:
        rows = {c["case"]: c for c in cases if c["impl"] == b}
        bad = [n for n in names if n not in rows or rows[n].get("status") != "ok"
               or rows[n].get("median_ms") is None]
        err = max((rows[n].get("rel_err_vs_torch") or 0.0 for n in names if n in rows), default=0.0)
        if bad:
            rejected[b] = f"{len(bad)} of {len(names)} cases did not run"
        elif err > MAX_REL_ERR:
            rejected[b] = f"error {err:.3g} against torch (limit {MAX_REL_ERR})"
        else:
            totals[b] = sum(rows[n]["median_ms"] for n in names)
    compiled = [c["median_ms"] for c in cases if c["impl"].startswith("torch.compile")
                and c.get("status") == "ok" and c.get("median_ms") is not None]
    row: dict = {"cases": len(names), "total_ms": totals, "rejected": rejected,
                 "torch_compile_total_ms": sum(compiled) if len(compiled) == len(names) else None}
    if "torch" not in totals:  # nothing to compare with: the reference serves the op
        row.update(winner="torch", why="torch's own time was not measured: torch's, the reference")
        return row
    winner = min(totals, key=lambda b: (totals[b], b != "torch"))  # a tie keeps torch
    others = ", ".join(f"{b} {_ms(t)}" for b, t in sorted(totals.items()) if b != winner)
    row.update(winner=winner, why=f"{winner} {_ms(totals[winner])} over {len(names)} case(s)"
               + (f" against {others}" if others else ""))
    return row


def gpu_entry(suite: dict, name: str | None = None) -> tuple[str, dict]:
    """(GPU name, its table entry) from a GPU suite's suite.json with an ops
    part; ``name`` overrides the GPU's (the CPU dry run has none)."""
    env = suite.get("environment") or {}
    gpu = name or (env.get("gpu") or {}).get("name")
    cases = ((suite.get("parts") or {}).get("ops") or {}).get("cases")
    if not gpu or not cases:
        raise ValueError("suite.json has no GPU name or no ops part: run python -m dawnbench_fast.gpu_suite "
                         "--only ops on a GPU first")
    by_op: dict[str, list[dict]] = {}
    for c in cases:
        by_op.setdefault(c["op"], []).append(c)
    return gpu, {"measured": env.get("recorded", ""), "git": env.get("git"), "torch": env.get("torch"),
                 "triton": env.get("triton"), "ops": {op: op_winner(cs) for op, cs in sorted(by_op.items())}}


def updated_table(table: dict, suite: dict, name: str | None = None) -> tuple[str, dict]:
    """(the suite's GPU, ``table`` with that GPU's entry added or replaced)."""
    gpu, entry = gpu_entry(suite, name)
    return gpu, {**table, "schema_version": SCHEMA_VERSION, "gpus": {**table["gpus"], gpu: entry}}


def write_table(table: dict, path: Path) -> None:
    """Write ``table`` atomically (temporary name, then rename)."""
    atomic.write_text(path, json.dumps(table, indent=1, sort_keys=True) + "\n")
