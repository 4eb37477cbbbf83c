"""The analyses' statistics against figures worked out by hand or read from
printed t tables, and the reading of run.json rows (times to thresholds,
"not reached", throughput)."""

from __future__ import annotations

import json
import math

import pytest
from support.analyze_fixtures import write_run

from dawnbench_fast.analyze import stats
from dawnbench_fast.analyze.run_records import find_run_files, read_run, read_runs
from dawnbench_fast.config.overrides import ConfigError


@pytest.mark.parametrize("df, table", [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (9, 2.262),
                                       (10, 2.228), (29, 2.045), (120, 1.980)])
def test_t_critical_matches_the_printed_table(df, table):
    assert stats.t_critical(0.95, df) == pytest.approx(table, abs=5e-4)


def test_t_critical_at_another_confidence():
    assert stats.t_critical(0.99, 4) == pytest.approx(4.604, abs=5e-4)
    assert stats.t_critical(0.90, 1) == pytest.approx(6.314, abs=5e-4)


@pytest.mark.parametrize("t", [0.3, 1.0, 2.5, 40.0])
def test_t_probability_closed_forms(t):
    # df 1 is the Cauchy distribution; df 2 has P(|T| <= t) = t / sqrt(2 + t^2)
    assert stats.t_two_sided_probability(t, 1) == pytest.approx(2 / math.pi * math.atan(t))
    assert stats.t_two_sided_probability(t, 2) == pytest.approx(t / math.sqrt(2 + t * t))


def test_describe_by_hand():
    d = stats.describe([1.0, 2.0, 3.0, 4.0, 5.0])
    # mean 3; sample variance (4 + 1 + 0 + 1 + 4) / 4 = 2.5
    assert d["n"] == 5 and d["mean"] == 3.0
    assert d["std"] == pytest.approx(1.5811388, rel=1e-7)
    assert d["cv"] == pytest.approx(1.5811388 / 3, rel=1e-7)
    # half width t(0.975, 4) * s / sqrt(5) = 2.7764451 * 1.5811388 / 2.2360680 = 1.9632432
    assert d["ci"] == pytest.approx([3 - 1.9632432, 3 + 1.9632432], rel=1e-6)


def test_describe_without_enough_values_is_null_not_nan():
    empty, one = stats.describe([]), stats.describe([7.5])
    assert empty == {"n": 0, "mean": None, "std": None, "cv": None, "ci": None, "confidence": 0.95}
    assert one["mean"] == 7.5 and one["std"] is None and one["ci"] is None and one["cv"] is None
    json.dumps([empty, one], allow_nan=False)  # no nan anywhere


def test_reached_fraction():
    assert stats.reached_fraction([3.0, None, 4.0, None]) == {"reached": 2, "runs": 4, "fraction": 0.5}
    assert stats.reached_fraction([]) == {"reached": 0, "runs": 0, "fraction": None}


def test_times_from_rows_and_not_reached(tmp_path):
    d = write_run(tmp_path / "a-s0", 0, [(1, 100.0, 0.80), (2, 200.0, 0.925), (3, 300.0, 0.935)])
    r = read_run(d / "run.json")
    assert r.time_to(0.9) == 200.0 and r.epoch_to(0.9) == 2 and r.time_to(0.925) == 200.0
    assert r.time_to(0.94) is None and r.epoch_to(0.94) is None  # never reached: no time, not the end
    assert r.end_clock == 300.0 and r.best_top1 == 0.935 and r.arm == "a" and r.evaluated_every_epoch()


def test_old_run_json_reads_the_hours_column(tmp_path):
    d = write_run(tmp_path / "old", 0, [(4, 360.0, 0.9), (8, 720.0, 0.95)], old_schema=True)
    r = read_run(d / "run.json")
    assert r.time_to(0.94) == pytest.approx(720.0) and not r.evaluated_every_epoch()


@pytest.mark.parametrize("epochs, images", [(2, 1800), (1.5, 1500)])
def test_throughput_counts_whole_steps(tmp_path, epochs, images):
    # 1000 images at batch 300: 3 steps an epoch (the remainder dropped); 1.5 epochs: 5 steps
    d = write_run(tmp_path / "t", 0, [(1, 5.0, 0.5)], batch_size=300, subset=1000, epochs=epochs, train_s=4.0)
    r = read_run(d / "run.json")
    assert r.images_trained() == images and r.throughput() == images / 4.0


def test_folders_are_found_at_any_depth(tmp_path):
    for s in (0, 1):
        write_run(tmp_path / "study" / "runs" / f"x-s{s}", s, [(1, 1.0, 0.5)])
    assert len(find_run_files([str(tmp_path / "study")])) == 2
    assert len(read_runs([str(tmp_path / "study" / "runs" / "x-s0")])) == 1
    assert len(read_runs([str(tmp_path / "study" / "runs" / "x-s1" / "run.json")])) == 1


def test_unreadable_inputs_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such file or folder"):
        find_run_files([str(tmp_path / "missing")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no run.json"):
        find_run_files([str(tmp_path / "empty")])
    d = write_run(tmp_path / "rowless", 0, [(1, 1.0, 0.5)])
    run = json.loads((d / "run.json").read_text())
    run["result"]["epochs"] = []
    (d / "run.json").write_text(json.dumps(run))
    with pytest.raises(ConfigError, match="no per-epoch rows"):
        read_run(d / "run.json")
    (d / "run.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        read_run(d / "run.json")
