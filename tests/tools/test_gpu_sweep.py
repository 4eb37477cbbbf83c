"""The GPU sweep scripts. tools/gpu_suite/sweep_bn_act.py: its dry
run goes through every configuration of both faces on the CPU (Triton's
interpreter, the C++ build). tools/gpu_suite/sweep_conv_group.py: its dry run
launches the conv group's two Triton GEMM kernels at every call of the
recipe's step with two configurations each (batch 1), compares each
configuration's outputs with the first's; its winners skip configurations
that spill or disagree and apply per (Cin, Cout). Both write the table and
JSON a GPU run fills; without a GPU and without --dry-run they refuse in one
line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.gpu_suite import sweep_bn_act as gpu_sweep_bn_act
from tools.gpu_suite import sweep_conv_group as conv_sweep

ROOT = Path(__file__).resolve().parents[2]


def _run(module: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", f"tools.gpu_suite.{module}", *args],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)


@pytest.mark.e2e
def test_dry_run_goes_through_every_configuration(tmp_path):
    r = _run("sweep_bn_act", "--out", str(tmp_path), "--dry-run", "--batch", "1")  # every config, one image
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((tmp_path / "sweep.json").read_text())
    n_triton = len(list(gpu_sweep_bn_act.triton_configs()))
    n_cuda = len(list(gpu_sweep_bn_act.cuda_configs()))
    faces = [row["face"] for row in rec["rows"]]
    assert faces.count("triton") == n_triton == 21 and faces.count("cpu") == n_cuda == 12
    assert not [row for row in rec["rows"] if "error" in row]  # every configuration ran
    assert all(set(row["ms"]) == {"C=64 @15px", "C=256 @7px", "C=256 @3px"} for row in rec["rows"])
    table = (tmp_path / "sweep.md").read_text().splitlines()
    text = "\n".join(table)
    assert len(table) == 2 + n_triton + n_cuda and "rows=128, block_c=32, warps=8" in text
    assert "programs=1024" in text and "finalize=64x64 w4" in text
    cuda_rows = [line for line in table if line.startswith("| cpu |")]
    assert all("partitions_max=" in line and "elements=" in line for line in cuda_rows)  # each its own config


def test_winners_are_the_fastest_timed_rows():
    rows = [{"face": "triton", "rows": 32, "ms": {}, "total_ms": 2.0},
            {"face": "triton", "rows": 64, "ms": {}, "total_ms": 1.5},
            {"face": "cuda", "partitions_max": 132, "ms": {}, "error": "x"},
            {"face": "cuda", "partitions_max": 528, "ms": {}, "total_ms": 0.9}]
    assert gpu_sweep_bn_act.winners(rows) == {"triton": {"rows": 64, "total_ms": 1.5},
                                               "cuda": {"partitions_max": 528, "total_ms": 0.9}}


@pytest.mark.parametrize("script", ["sweep_bn_act", "sweep_conv_group"])
def test_without_a_gpu_it_refuses_in_one_line(tmp_path, script):
    r = _run(script, "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--dry-run" in r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.e2e
def test_dry_run_launches_every_call_with_two_configurations(tmp_path):
    r = _run("sweep_conv_group", "--out", str(tmp_path), "--dry-run", "--batch", "1", "--first", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((tmp_path / "sweep.json").read_text())
    rows = rec["rows"]
    assert [(row["kind"], row["config"]) for row in rows] == (
        [("fwd", "cuDNN"), ("wgrad", "cuDNN")]
        + [("fwd", "x".join(map(str, c))) for c in conv_sweep.CONV_CONFIGS[:2]]
        + [("wgrad", "x".join(map(str, c))) for c in conv_sweep.WGRAD_CONFIGS[:2]])
    assert not [row for row in rows if "error" in row]
    fwd_calls = {n for row in rows if row["kind"] == "fwd" for n in row["ms"]}
    assert len(fwd_calls) == 12 and len({n for row in rows if row["kind"] == "wgrad" for n in row["ms"]}) == 6
    # the second configuration's tiles differ from the first's; the outputs agree
    assert all(row["rel_err_vs_first"] < 1e-2 for row in rows if row["config"] != "cuDNN")
    table = (tmp_path / "sweep.md").read_text()
    second = "x".join(map(str, conv_sweep.CONV_CONFIGS[1]))
    assert f"| {second} |" in table and "wgrad conv1 24->64 @31" in table


def test_conv_winners_skip_spills_and_disagreements():
    rows = [{"kind": "wgrad", "config": "cuDNN", "ms": {"a": 1.0}},
            {"kind": "wgrad", "config": "64", "ms": {"a": 2.0}, "spills": 0, "rel_err_vs_first": 0.0},
            {"kind": "wgrad", "config": "128", "ms": {"a": 1.5}, "spills": 0, "rel_err_vs_first": 0.0},
            {"kind": "wgrad", "config": "fast-spill", "ms": {"a": 0.5}, "spills": 8, "rel_err_vs_first": 0.0},
            {"kind": "wgrad", "config": "fast-wrong", "ms": {"a": 0.4}, "spills": 0, "rel_err_vs_first": 0.5}]
    assert conv_sweep.winners(rows) == {"a": {"config": "128", "ms": 1.5, "cudnn_ms": 1.0}}


def test_channel_winners_sum_a_pairs_calls_and_apply_per_pair():
    from dawnbench_fast.kernels import conv_group as tk

    record = {"calls": {"a": [64, 256], "b": [64, 256], "c": [256, 256]},
              "rows": [{"kind": "fwd", "config": "cuDNN", "ms": {"a": 0.1, "b": 0.1, "c": 0.1}},
                       {"kind": "fwd", "config": "128x128x32x8x3", "ms": {"a": 1.0, "b": 1.0, "c": 1.0}},
                       {"kind": "fwd", "config": "64x64x64x4x4", "ms": {"a": 0.5, "b": 1.6, "c": 0.9}},
                       {"kind": "fwd", "config": "256x64x32x8x3", "ms": {"a": 0.1, "b": 0.1, "c": 0.1},
                        "spills": 4}]}
    table = conv_sweep.channel_winners(record)
    assert table == {"fwd": {(64, 256): (128, 128, 32, 8, 3), (256, 256): (64, 64, 64, 4, 4)}, "wgrad": {}}
    default = tk.conv_blocks(24, 64)
    with conv_sweep.applied(table):
        assert tk.conv_blocks(64, 256) == (128, 128, 32, 8, 3)
        assert tk.conv_blocks(256, 256) == (64, 64, 64, 4, 4)
        assert tk.conv_blocks(24, 64) == default  # no winner: the default
    assert tk.conv_blocks.__module__ == tk.__name__  # restored
