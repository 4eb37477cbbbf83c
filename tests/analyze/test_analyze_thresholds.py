"""``analyze thresholds``: times to several accuracies from every-epoch rows,
"not reached" where a run stayed below a threshold, and its flag's checks.
Runs are written by the test (--from) or by a fake trainer launch."""

from __future__ import annotations

import json

import pytest
from support.analyze_fixtures import fake_launch, flag, write_run

from dawnbench_fast.analyze import thresholds, training_runs
from dawnbench_fast.analyze.__main__ import main
from dawnbench_fast.config.overrides import ConfigError

# seed -> per-epoch (epoch, clock s, top-1); seed 2 ends 0.08 points short of 94%
ROWS = {
    0: [(1, 100.0, 0.905), (2, 200.0, 0.925), (3, 300.0, 0.941)],
    1: [(1, 110.0, 0.895), (2, 220.0, 0.931), (3, 330.0, 0.945)],
    2: [(1, 105.0, 0.91), (2, 210.0, 0.932), (3, 315.0, 0.9392)],
}


def study(tmp_path):
    for seed, rows in ROWS.items():
        write_run(tmp_path / "runs" / f"default-s{seed}", seed, rows)
    return tmp_path / "runs"


def test_times_to_each_threshold(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["thresholds", "--from", str(study(tmp_path)), "--thresholds", "0.90,0.93,0.94",
                 "--out", str(out)]) == 0
    data = json.loads((out / "thresholds.json").read_text())
    by = {lv["threshold"]: lv for lv in data["levels"]}
    assert [x["time_s"] for x in by[0.90]["runs"]] == [100.0, 220.0, 105.0]
    assert [x["time_s"] for x in by[0.93]["runs"]] == [300.0, 220.0, 210.0]
    assert [x["time_s"] for x in by[0.94]["runs"]] == [300.0, 330.0, None]
    assert by[0.94]["reached"] == {"reached": 2, "runs": 3, "fraction": 2 / 3}
    assert by[0.94]["time_s"]["mean"] == 315.0  # over the two that reached it
    assert by[0.94]["runs"][2]["short_by"] == pytest.approx(0.0008)
    # per run, time to 94% over time to 93%, over the runs with both: (300/300 + 330/220) / 2
    assert by[0.94]["ratio_to_previous"] == pytest.approx(1.25)
    text = capsys.readouterr().out
    assert "not reached" in text and "0.08 points short" in text
    assert (out / "thresholds.png").stat().st_size > 1000 and not data["not_evaluated_every_epoch"]


def test_runs_not_evaluated_every_epoch_are_named(tmp_path):
    write_run(tmp_path / "r" / "final-only-s0", 0, [(8, 800.0, 0.941)])
    assert main(["thresholds", "--from", str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 0
    data = json.loads((tmp_path / "o" / "thresholds.json").read_text())
    assert data["not_evaluated_every_epoch"] == ["final-only-s0"]
    assert "--eval-every 1" in (tmp_path / "o" / "thresholds.txt").read_text()


def test_trained_runs_are_evaluated_every_epoch(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(training_runs, "launch_trainer", fake_launch(lambda argv: ROWS[0], calls))
    assert main(["thresholds", "--runs", "2", "--out", str(tmp_path / "o")]) == 0
    assert len(calls) == 2 and all(flag(c, "--eval-every") == "1" for c in calls)
    assert all(flag(c, "--target") == "0.94" for c in calls)  # the highest threshold
    data = json.loads((tmp_path / "o" / "thresholds.json").read_text())
    assert [lv["reached"]["reached"] for lv in data["levels"]] == [2, 2, 2, 2, 2]


@pytest.mark.parametrize("text, why", [("0.9,abc", "comma-separated"), ("94", r"\(0, 1\]"),
                                       ("0.9,0.9", "repeated"), ("nan", r"\(0, 1\]")])
def test_bad_thresholds(text, why):
    with pytest.raises(ConfigError, match=why):
        thresholds.parse_thresholds(text)


def test_thresholds_are_sorted():
    assert thresholds.parse_thresholds("0.94,0.9") == (0.9, 0.94)
