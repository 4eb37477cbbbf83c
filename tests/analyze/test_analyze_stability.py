"""``analyze stability``: read back (--from) on run folders written by the test,
and one end-to-end study that really trains two tiny runs through the
command line, to a target they reach."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.analyze_fixtures import fake_launch, flag, write_run
from support.cifar_data import cifar_dir

from dawnbench_fast.analyze import training_runs
from dawnbench_fast.analyze.__main__ import main

# final accuracies and times to 94% (None: ended below it at 800 s)
RUNS = [(0.941, 818.0), (0.942, 905.0), (0.939, None), (0.938, None), (0.9405, 733.0)]


def five_runs(tmp_path):
    for seed, (acc, t) in enumerate(RUNS):
        rows = [(1, 400.0, 0.90), (2, t or 800.0, acc)]
        write_run(tmp_path / "runs" / f"default-s{seed}", seed, rows)
    return tmp_path / "runs"


def test_stability_from_run_folders(tmp_path, capsys):
    src = five_runs(tmp_path)
    assert main(["stability", "--from", str(src), "--out", str(tmp_path / "out")]) == 0
    data = json.loads((tmp_path / "out" / "stability.json").read_text())
    assert data["reached"] == {"reached": 3, "runs": 5, "fraction": 0.6}
    t = data["time_to_target_s"]
    assert t["n"] == 3 and t["mean"] == pytest.approx((818 + 905 + 733) / 3)
    # sample std of 818, 905, 733 around 818.667: sqrt((0.444 + 7453.44 + 7338.78) / 2) = 86.002
    assert t["std"] == pytest.approx(86.0019, abs=1e-3)
    assert t["cv"] == pytest.approx(86.0019 / 818.6667, rel=1e-5)
    acc = data["final_top1"]
    assert acc["n"] == 5 and acc["mean"] == pytest.approx(0.9401)
    assert [r["time_to_target_s"] for r in data["runs"]] == [818.0, 905.0, None, None, 733.0]
    text = capsys.readouterr().out
    assert text.count("not reached") == 2 and "3/5" in text
    assert (tmp_path / "out" / "stability.png").stat().st_size > 1000
    assert (tmp_path / "out" / "stability.txt").read_text().startswith("stability: 5 run(s)")


def test_stability_from_judges_by_the_target_asked(tmp_path):
    src = five_runs(tmp_path)
    assert main(["stability", "--from", str(src), "--target", "0.9", "--out", str(tmp_path / "o")]) == 0
    data = json.loads((tmp_path / "o" / "stability.json").read_text())
    assert data["reached"]["reached"] == 5 and data["time_to_target_s"]["mean"] == 400.0
    assert "below DAWNBench's 94%" in data["target_note"]


@pytest.mark.e2e
def test_a_study_trains_its_runs_end_to_end(tmp_path):
    """Two tiny runs (1,000 images, a narrow net, one view, the reference
    kernels: the cheapest warm-up) to 15%, which they reach; the run folders
    stay for --from, and the analysis writes no NaN."""
    out = tmp_path / "study"
    env = {**os.environ, "DAWNBENCH_DATA": str(cifar_dir())}
    r = subprocess.run(
        [sys.executable, "-m", "dawnbench_fast.analyze", "stability", "--runs", "2", "--target", "0.15",
         "--out", str(out), "--", "--subset", "1000", "--set", "whiten_images=1000", "--eval-subset", "500",
         "--batch-size", "250",
         "--epochs", "2", "--set", "widths=16,32,32", "--set", "tta_level=0", "--kernels", "torch",
         "--threads", "2"],
        capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "[1/2] default seed 0: training" in r.stdout and "[2/2] default seed 1: final top-1" in r.stdout
    raw = (out / "stability.json").read_text()
    data = json.loads(raw, parse_constant=lambda c: pytest.fail(f"{c} in stability.json"))
    assert data["reached"] == {"reached": 2, "runs": 2, "fraction": 1.0}
    assert all(x["time_to_target_s"] > 0 for x in data["runs"])
    assert data["time_to_target_s"]["ci"] is not None and data["final_top1"]["ci"] is not None
    assert {p.name for p in (out / "runs").iterdir()} >= {"default-s0", "default-s1", "default-s0.log"}
    assert (out / "stability.png").exists()
    # the kept folders are a study of their own for --from
    assert main(["stability", "--from", str(out / "runs"), "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "stability.json").read_text())
    assert again["time_to_target_s"] == data["time_to_target_s"]


def test_resume_reads_finished_runs_back_and_goes_on_with_the_rest(tmp_path, monkeypatch, capsys):
    calls: list = []
    monkeypatch.setattr(training_runs, "launch_trainer", fake_launch(lambda argv: [(1, 5.0, 0.95)], calls))
    out = tmp_path / "study"
    assert main(["stability", "--runs", "2", "--out", str(out)]) == 0
    assert len(calls) == 2
    # seed 1 was interrupted: its run.json gone, its checkpoint left
    (out / "runs" / "default-s1" / "run.json").unlink()
    (out / "runs" / "default-s1" / "checkpoint.pt").write_bytes(b"")
    assert main(["stability", "--runs", "2", "--resume", str(out)]) == 0
    assert len(calls) == 3 and flag(calls[2], "--resume") == str(out / "runs" / "default-s1")
    assert "default seed 0: read back" in capsys.readouterr().out
    # a different study in the same folder is refused, not mislabelled
    assert main(["stability", "--runs", "2", "--resume", str(out), "--target", "0.5"]) == 2
    assert "trained by another command" in capsys.readouterr().err and len(calls) == 3
