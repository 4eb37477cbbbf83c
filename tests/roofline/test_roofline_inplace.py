"""The in-place op timer (roofline/inplace.py): every op of a block timed by
a clock around it, written as a profiler-format trace that the report reads
as it reads the profiler's; the CLI's ``--profile-timer``."""

from __future__ import annotations

import json
import time

import pytest
import torch

from dawnbench_fast import roofline
from dawnbench_fast.roofline.inplace import InplaceCapture
from dawnbench_fast.roofline.peaks import Peaks
from dawnbench_fast.roofline.report import build_report
from dawnbench_fast.roofline.text_report import render_text

PEAKS = Peaks("test cpu", {"fp32": 100e9, "bf16": 400e9}, 50e9, "cpu",
              {"fp32": "test", "bf16": "test", "bandwidth": "test"})


def test_each_op_is_timed_and_counted_as_the_profiler_would(tmp_path):
    gen = torch.Generator().manual_seed(7)
    a, b = torch.randn(300, 257, generator=gen), torch.randn(257, 190, generator=gen)
    small = torch.randn(5, generator=gen)
    with InplaceCapture("cpu", tmp_path / "trace.json", steps=2) as cap:
        for _ in range(2):
            torch.mm(a, b)
            small.add(1.0)
    data = json.loads((tmp_path / "trace.json").read_text())
    assert data["dawnbench_timer"] == "inplace"
    names = [e["name"] for e in data["traceEvents"]]
    assert names == ["aten::mm", "aten::add", "aten::mm", "aten::add"]
    mm = data["traceEvents"][0]
    assert mm["args"]["Input Dims"] == [[300, 257], [257, 190]] and mm["args"]["Input type"] == ["float"] * 2
    rep = build_report(cap.trace_path, PEAKS, steps=2)
    assert rep.time_basis == "inplace" and "timed in place (no profiler)" in render_text(rep)
    rows = {r.op: r for r in rep.rows}
    assert rows["aten::mm"].flops == pytest.approx(2 * 2 * 300 * 257 * 190)
    assert rows["aten::mm"].time_us > rows["aten::add"].time_us > 0  # 29 MFLOP against 5 adds
    assert cap.wall_s * 1e6 >= sum(e["dur"] for e in data["traceEvents"])


def test_a_slow_op_gets_its_own_time_not_its_neighbours(tmp_path):
    """The clock brackets the op itself: a pause between ops is not charged to either."""
    x = torch.ones(3)
    with InplaceCapture(None, tmp_path / "t.json") as cap:
        x.mul(2.0)
        time.sleep(0.05)
        x.sub(1.0)
    events = json.loads(cap.trace_path.read_text())["traceEvents"]
    assert [e["name"] for e in events] == ["aten::mul", "aten::sub"]
    assert all(e["dur"] < 40_000 for e in events)  # µs: neither took the 50 ms pause
    assert events[1]["ts"] - events[0]["ts"] >= 50_000
    assert cap.wall_s >= 0.05


def test_cuda_is_refused_and_profile_training_takes_the_timer(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="CPU ops only"):
        InplaceCapture("cuda:0").__enter__()
    monkeypatch.setattr("dawnbench_fast.roofline.cpu_peaks.cpu_peaks", lambda **kw: PEAKS)
    lin = torch.nn.Linear(11, 5)
    x = torch.randn(7, 11)
    out = roofline.profile_training(lambda: lin(x).sum().backward(), 2, tmp_path / "prof",
                                    device="cpu", timer="inplace")
    report = json.loads((out / "report.json").read_text())
    assert report["time_basis"] == "inplace" and report["totals"]["matmul_conv_flops"] > 0
    with pytest.raises(ValueError, match="--profile-timer"):
        roofline.profile_training(lambda: None, 1, tmp_path / "p2", timer="stopwatch")
