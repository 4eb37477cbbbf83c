"""benchmarks/gpu_sweep_conv_group.py (issue 30): its dry run launches the conv
group's two Triton GEMM kernels at every call of the recipe's step with two
configurations each (Triton's interpreter, batch 1), compares each
configuration's outputs with the first's, and writes the table and JSON a GPU
run fills; the winners skip configurations that spill or disagree; without a
GPU and without --dry-run it refuses in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_sweep_conv_group.py"
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_sweep_conv_group as sweep  # noqa: E402


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)


def test_dry_run_launches_every_call_with_two_configurations(tmp_path):
    r = _run("--out", str(tmp_path), "--dry-run", "--batch", "1", "--first", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((tmp_path / "sweep.json").read_text())
    rows = rec["rows"]
    assert [(row["kind"], row["config"]) for row in rows] == (
        [("fwd", "cuDNN"), ("wgrad", "cuDNN")]
        + [("fwd", "x".join(map(str, c))) for c in sweep.CONV_CONFIGS[:2]]
        + [("wgrad", "x".join(map(str, c))) for c in sweep.WGRAD_CONFIGS[:2]])
    assert not [row for row in rows if "error" in row]
    fwd_calls = {n for row in rows if row["kind"] == "fwd" for n in row["ms"]}
    assert len(fwd_calls) == 12 and len({n for row in rows if row["kind"] == "wgrad" for n in row["ms"]}) == 6
    # the second configuration's tiles differ from the first's; the outputs agree
    assert all(row["rel_err_vs_first"] < 1e-2 for row in rows if row["config"] != "cuDNN")
    table = (tmp_path / "sweep.md").read_text()
    assert f"| {'x'.join(map(str, sweep.CONV_CONFIGS[1]))} |" in table and "wgrad conv1 24->64 @31" in table


def test_winners_skip_spills_and_disagreements():
    rows = [{"kind": "wgrad", "config": "cuDNN", "ms": {"a": 1.0}},
            {"kind": "wgrad", "config": "64", "ms": {"a": 2.0}, "spills": 0, "rel_err_vs_first": 0.0},
            {"kind": "wgrad", "config": "128", "ms": {"a": 1.5}, "spills": 0, "rel_err_vs_first": 0.0},
            {"kind": "wgrad", "config": "fast-spill", "ms": {"a": 0.5}, "spills": 8, "rel_err_vs_first": 0.0},
            {"kind": "wgrad", "config": "fast-wrong", "ms": {"a": 0.4}, "spills": 0, "rel_err_vs_first": 0.5}]
    assert sweep.winners(rows) == {"a": {"config": "128", "ms": 1.5, "cudnn_ms": 1.0}}


def test_without_a_gpu_it_refuses_in_one_line(tmp_path):
    r = _run("--out", str(tmp_path / "o"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--dry-run" in r.stderr
    assert not (tmp_path / "o").exists()


def test_channel_winners_sum_a_pairs_calls_and_apply_per_pair():
    from dawnbench_fast.kernels import conv_group as tk

    record = {"calls": {"a": [64, 256], "b": [64, 256], "c": [256, 256]},
              "rows": [{"kind": "fwd", "config": "cuDNN", "ms": {"a": 0.1, "b": 0.1, "c": 0.1}},
                       {"kind": "fwd", "config": "128x128x32x8x3", "ms": {"a": 1.0, "b": 1.0, "c": 1.0}},
                       {"kind": "fwd", "config": "64x64x64x4x4", "ms": {"a": 0.5, "b": 1.6, "c": 0.9}},
                       {"kind": "fwd", "config": "256x64x32x8x3", "ms": {"a": 0.1, "b": 0.1, "c": 0.1},
                        "spills": 4}]}
    table = sweep.channel_winners(record)
    assert table == {"fwd": {(64, 256): (128, 128, 32, 8, 3), (256, 256): (64, 64, 64, 4, 4)}, "wgrad": {}}
    default = tk.conv_blocks(24, 64)
    with sweep.applied(table):
        assert tk.conv_blocks(64, 256) == (128, 128, 32, 8, 3)
        assert tk.conv_blocks(256, 256) == (64, 64, 64, 4, 4)
        assert tk.conv_blocks(24, 64) == default  # no winner: the default
    assert tk.conv_blocks.__module__ == tk.__name__  # restored
