"""``--kernels auto`` on a GPU: each op's measured winner, per GPU model.

The table (``kernel_winners.json`` beside this module, committed) is keyed by
the GPU's name as NVML reports it (``"NVIDIA H100 80GB HBM3"``). The GPU
suite's ops part writes it (``python -m tools.gpu_suite``, ``--winners-out``) from
its medians: for each op, the backend whose summed median over the op's cases
is lowest, torch eager's included, provided every case of that backend ran
and agreed with torch: rows of ``source`` "eager" (a row without one is
eager too). The in-step benchmark (benchmarks/bench_in_step.py,
tools/step_timing.py) times the whole captured training step with each face
switched in one op at a time; :func:`updated_table_in_step` merges its
result: for each op it measured, the face whose arm's step is fastest,
provided it beats torch's arm and its first step's loss agrees with torch's,
in a row of ``source`` "in-step" that replaces the eager one (ops it did not
measure keep their eager rows, labelled so). ``auto`` takes the table's
winner on a listed GPU and torch's op on any other; nothing is timed at
start-up, so a run's choice is known before it starts and recorded in
run.json (``dispatch.op_table``'s ``why``, and ``in_step``: the in-step
figures behind the choice, where the row has them).
"""

from __future__ import annotations

import json
import math
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
IN_STEP = "in-step"  # a row's source: the in-step benchmark (else the GPU suite's eager medians)


def load_table(path: Path | None = None) -> dict:
    """The winners table (default: the committed one); a missing file is an
    empty table (every GPU unlisted)."""
    path = TABLE_PATH if path is None else path
    if not path.exists():
        return {"schema_version": SCHEMA_VERSION, "gpus": {}}
    table = json.loads(path.read_text())
    if table.get("schema_version") != SCHEMA_VERSION or not isinstance(table.get("gpus"), dict):
        raise ValueError(f"{path}: not a kernel winners table of schema {SCHEMA_VERSION} "
                         "(rewrite it with python -m tools.gpu_suite --only ops --winners-out, from the "
                         "repository root)")
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
            when = row.get("measured") or entry.get("measured", "")
            label = "in-step (the captured step)" if row.get("source") == IN_STEP else "eager medians"
            picked[op], why[op] = row["winner"], f"{label} measured on {gpu} {when[:10]}: {row['why']}"
    return picked, why


def figures(gpu: str, ops: Iterable[str], table: dict) -> dict[str, dict]:
    """{op: the in-step figures behind its row} for ``gpu``'s in-step rows
    (run.json's ``ops[op].in_step``); ops with eager rows or none are absent."""
    rows = (table["gpus"].get(gpu) or {}).get("ops", {})
    return {op: {k: rows[op].get(k) for k in ("step_ms", "first_loss", "replays", "measured")}
            for op in ops if op in rows and rows[op].get("source") == IN_STEP}


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
    row: dict = {"source": "eager", "cases": len(names), "total_ms": totals, "rejected": rejected,
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
        raise ValueError("suite.json has no GPU name or no ops part: run python -m tools.gpu_suite "
                         "--only ops on a GPU first (from the repository root)")
    by_op: dict[str, list[dict]] = {}
    for c in cases:
        by_op.setdefault(c["op"], []).append(c)
    return gpu, {"measured": env.get("recorded", ""), "git": env.get("git"), "torch": env.get("torch"),
                 "triton": env.get("triton"), "ops": {op: op_winner(cs) for op, cs in sorted(by_op.items())}}


def updated_table(table: dict, suite: dict, name: str | None = None) -> tuple[str, dict]:
    """(the suite's GPU, ``table`` with that GPU's entry added or replaced;
    its in-step rows kept: eager medians never overrule the captured step)."""
    gpu, entry = gpu_entry(suite, name)
    old = table["gpus"].get(gpu) or {}
    kept = {op: row for op, row in old.get("ops", {}).items() if row.get("source") == IN_STEP}
    if kept:
        entry = {**entry, "ops": {**entry["ops"], **kept}, "in_step": old.get("in_step")}
    return gpu, {**table, "schema_version": SCHEMA_VERSION, "gpus": {**table["gpus"], gpu: entry}}


def write_table(table: dict, path: Path) -> None:
    """Write ``table`` atomically (temporary name, then rename)."""
    atomic.write_text(path, json.dumps(table, indent=1, sort_keys=True) + "\n")


# -- From the in-step benchmark ------------------------------------


def _faces(arm: dict) -> dict[str, str]:
    """The ops an arm ran on a face other than torch's (its record's ``ops``)."""
    return {op: b for op, b in (arm.get("ops") or {}).items() if b != "torch"}


def in_step_rows(result: dict) -> dict[str, dict]:
    """{op: its table row} from an in-step result (tools/step_timing.py):
    per op with at least one arm that switched it alone and ran, the face
    whose step median is lowest, torch's arm's included (a tie keeps torch);
    a face whose first step's loss differs from torch's arm's by more than
    :data:`MAX_REL_ERR` (relative), or whose last loss is not finite, is
    rejected, however fast."""
    ok = [a for a in result.get("arms", []) if a.get("status") == "ok"]
    base = next((a for a in ok if a["arm"] == "torch"), None)
    if base is None:
        raise ValueError("the in-step result has no torch arm that ran: nothing to compare with "
                         "(run benchmarks/bench_in_step.py with the arm torch)")
    when, replays = result.get("recorded", ""), (result.get("settings") or {}).get("replays")
    by_op: dict[str, dict[str, dict]] = {}
    for arm in ok:
        faces = _faces(arm)
        if arm.get("arm", "").count("=") == 1 and len(faces) == 1:
            (op, face), = faces.items()
            if face in GPU_BACKENDS:  # a CPU dry run's cpu arm measures no GPU face
                by_op.setdefault(op, {})[face] = arm
    rows = {}
    for op, arms in sorted(by_op.items()):
        step = {"torch": base["step_ms"]["median"]}
        rejected = {}
        for face, arm in sorted(arms.items()):
            err = abs(arm["first_loss"] - base["first_loss"]) / max(abs(base["first_loss"]), 1e-12)
            if err > MAX_REL_ERR or not math.isfinite(arm["last_loss"]):
                rejected[face] = (f"first loss {arm['first_loss']:.5g} against torch's "
                                  f"{base['first_loss']:.5g}, last {arm['last_loss']:.5g}")
            else:
                step[face] = arm["step_ms"]["median"]
        winner = min(step, key=lambda b: (step[b], b != "torch"))
        others = ", ".join(f"{b} {_ms(t)}" for b, t in sorted(step.items()) if b != winner)
        rows[op] = {"source": IN_STEP, "winner": winner, "measured": when, "replays": replays,
                    "step_ms": step, "first_loss": {"torch": base["first_loss"],
                                                    **{f: a["first_loss"] for f, a in arms.items()}},
                    "rejected": rejected,
                    "why": f"{op} on {winner}: {_ms(step[winner])} a captured step"
                           + (f" against {others}" if others else "")}
    return rows


def updated_table_in_step(table: dict, result: dict, name: str | None = None) -> tuple[str, dict]:
    """(the result's GPU, ``table`` with that GPU's entry's rows for the ops
    the in-step result measured replaced by in-step rows; its other rows
    kept, eager). ``name`` overrides the GPU's (a CPU dry run has none)."""
    env = result.get("environment") or {}
    gpu = name or (env.get("gpu") or {}).get("name")
    if not gpu:
        raise ValueError("the in-step result names no GPU: run benchmarks/bench_in_step.py on a GPU "
                         "(or name one)")
    rows = in_step_rows(result)
    old = table["gpus"].get(gpu) or {"measured": result.get("recorded", ""), "ops": {}}
    entry = {**old, "ops": {**old.get("ops", {}), **rows},
             "in_step": {"recorded": result.get("recorded"), "git": env.get("git"),
                         "torch": (env.get("versions") or {}).get("torch"),
                         "arms": {a["arm"]: a.get("step_ms", {}).get("median") if a.get("status") == "ok"
                                  else a.get("status") for a in result.get("arms", [])}}}
    return gpu, {**table, "schema_version": SCHEMA_VERSION, "gpus": {**table["gpus"], gpu: entry}}
