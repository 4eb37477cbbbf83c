"""benchmarks/gpu_sweep_bn_act.py (issue 30): its dry run goes through every
configuration of both faces on the CPU (Triton's interpreter, the C++ build)
and writes the table and JSON a GPU run fills; without a GPU and without
--dry-run it refuses in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_sweep_bn_act.py"
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_sweep_bn_act  # noqa: E402


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)


def test_dry_run_goes_through_every_configuration(tmp_path):
    r = _run("--out", str(tmp_path), "--dry-run")
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((tmp_path / "sweep.json").read_text())
    n_triton = len(list(gpu_sweep_bn_act.triton_configs()))
    n_cuda = len(list(gpu_sweep_bn_act.cuda_configs()))
    faces = [row["face"] for row in rec["rows"]]
    assert faces.count("triton") == n_triton == 18 and faces.count("cpu") == n_cuda == 12
    assert not [row for row in rec["rows"] if "error" in row]  # every configuration ran
    assert all(set(row["ms"]) == {"C=64 @15px", "C=256 @7px", "C=256 @3px"} for row in rec["rows"])
    table = (tmp_path / "sweep.md").read_text().splitlines()
    assert len(table) == 2 + n_triton + n_cuda and "rows=128, block_c=32, warps=8" in "\n".join(table)
    cuda_rows = [line for line in table if line.startswith("| cpu |")]
    assert all("partitions_max=" in line and "elements=" in line for line in cuda_rows)  # each its own config


def test_winners_are_the_fastest_timed_rows():
    rows = [{"face": "triton", "rows": 32, "ms": {}, "total_ms": 2.0},
            {"face": "triton", "rows": 64, "ms": {}, "total_ms": 1.5},
            {"face": "cuda", "partitions_max": 132, "ms": {}, "error": "x"},
            {"face": "cuda", "partitions_max": 528, "ms": {}, "total_ms": 0.9}]
    assert gpu_sweep_bn_act.winners(rows) == {"triton": {"rows": 64, "total_ms": 1.5},
                                               "cuda": {"partitions_max": 528, "total_ms": 0.9}}


def test_without_a_gpu_it_refuses_in_one_line(tmp_path):
    r = _run("--out", str(tmp_path / "o"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--dry-run" in r.stderr
    assert not (tmp_path / "o").exists()
