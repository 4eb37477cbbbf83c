"""``analyze leaderboard``: the shipped records say what docs/FACTS.md says
(no entry, time or source of their own), and a run is placed by its time to
94%, or not placed when it never reached 94%."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.analyze_fixtures import write_run

from dawnbench_fast.analyze import leaderboard
from dawnbench_fast.analyze.__main__ import main

FACTS = (Path(__file__).resolve().parents[2] / "docs" / "FACTS.md").read_text()


def test_records_are_facts_md_s():
    records = leaderboard.load_records()
    assert records["target"] == 0.94
    for e in records["entries"]:
        # every figure and source is in FACTS.md; no record states a cost there
        assert re.sub(r"\.?0+$", "", f"{e['time_seconds']}") in FACTS, e["entry"]
        assert e["sources"] and all(s in FACTS for s in e["sources"]), e["entry"]
        assert e["cost_usd"] is None
        for key in ("mean_top1", "epochs", "training_pflop"):
            if e[key] is not None:
                shown = f"{100 * e[key]:.2f}" if key == "mean_top1" else f"{e[key]}"
                assert shown in FACTS, (e["entry"], key)
    times = sorted(e["time_seconds"] for e in records["entries"])
    assert times == [1.99, 2.015, 2.59, 3.09, 6.2, 9.4, 26, 815, 834]


@pytest.mark.parametrize("seconds, rank", [(1.0, 1), (2.0, 2), (2.015, 3), (10.0, 7), (818.4, 9),
                                           (900.0, 10)])
def test_rank(seconds, rank):
    # a tie goes ahead of the run (2.015 s is hiverge's: the run comes third)
    assert leaderboard.rank_of(seconds, leaderboard.load_records()["entries"]) == rank


def test_a_run_is_placed(tmp_path, capsys):
    run = write_run(tmp_path / "run", 0, [(7, 700.0, 0.93), (8, 818.4, 0.941)],
                    hardware="AMD EPYC, 2 threads", train_cost_usd=0.25)
    assert main(["leaderboard", str(run), "--out", str(tmp_path / "o")]) == 0
    data = json.loads((tmp_path / "o" / "leaderboard.json").read_text())
    # behind the seven GPU rows; the two CPU rows are listed, not ranked by seconds from elsewhere
    assert data["rank"] == 8 and data["of"] == 8
    assert data["table"][7]["entry"] == "this run" and data["table"][7]["time_seconds"] == 818.4
    assert [e["time_seconds"] for e in data["table"][8:]] == [815, 834]
    assert data["run"]["cost_usd"] == 0.25 and data["run"]["hardware"] == "AMD EPYC, 2 threads"
    out = capsys.readouterr().out
    assert "place 8 of 8" in out and "compare.py's ratio (--compare)" in out
    assert (tmp_path / "o" / "leaderboard.png").stat().st_size > 1000


def test_a_run_below_94_is_not_placed(tmp_path, capsys):
    # trained for 30%, which it reached: DAWNBench's 94% it did not
    run = write_run(tmp_path / "run", 0, [(1, 10.0, 0.35)], target=0.3)
    assert main(["leaderboard", str(run / "run.json"), "--out", str(tmp_path / "o")]) == 0
    data = json.loads((tmp_path / "o" / "leaderboard.json").read_text())
    assert data["rank"] is None and data["run"]["time_seconds"] is None
    assert all(not e["entry"].startswith("this run") for e in data["table"])
    assert "not reached" in capsys.readouterr().out


def test_seeds_are_placed_by_their_mean(tmp_path):
    for seed, t in ((0, 800.0), (1, 820.0)):
        write_run(tmp_path / "runs" / f"seed{seed}", seed, [(8, t, 0.941)])
    write_run(tmp_path / "more" / "seed2", 2, [(8, 700.0, 0.935)])
    # several RESULTs are read together: seeds kept in two places
    assert main(["leaderboard", str(tmp_path / "runs"), str(tmp_path / "more"), "--out",
                 str(tmp_path / "o")]) == 0
    data = json.loads((tmp_path / "o" / "leaderboard.json").read_text())
    assert data["run"]["time_seconds"] == 810.0 and data["run"]["reached"]["reached"] == 2
    assert data["run"]["runs"] == 3
    assert data["rank"] == 8  # between 26 s and 815 s


def test_a_cpu_row_carries_its_cpu_and_date(tmp_path, capsys):
    records = leaderboard.load_records()
    cpu_rows = [e for e in records["entries"] if "cpu" in e]
    assert [e["time_seconds"] for e in cpu_rows] == [815, 834]
    for e in cpu_rows:
        assert {"name", "family", "model"} <= set(e["cpu"]) and e["date"]
    port = cpu_rows[1]
    assert "Zen 5" not in port["hardware"] and port["date"] == "2026-11-22"  # its class was not recorded
    run = write_run(tmp_path / "run", 0, [(8, 640.0, 0.941)])
    assert main(["leaderboard", str(run), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "2 cores of an AMD EPYC (family/model not recorded), 2 threads (AMD EPYC, family/model not " \
           "recorded; 2026-11-22)" in out
    line = next(ln for ln in out.splitlines() if "ported as-is" in ln)
    assert line.split()[0] == "-"  # not ranked


def _compare(folder: Path, ratio: float, family: str = "26", model: str = "2") -> Path:
    """compare.py's output: its JSON and one of our runs' run.json beside it."""
    folder.mkdir(parents=True)
    rows = [{"side": "ours", "seed": 0, "acc": 94.2, "end_clock": 390.0, "to_target": 390.0, "wall": 420.0},
            {"side": "peer", "seed": 0, "acc": 94.0, "end_clock": 390.0 / ratio, "to_target": 390.0 / ratio,
             "wall": 700.0}]
    summary = {"ours": {"acc_mean": 94.2, "end_clock_mean": 390.0, "to_target_mean": 390.0, "reached": "1/1",
                        "wall_mean": 420.0},
               "peer": {"acc_mean": 94.0, "end_clock_mean": 390.0 / ratio, "to_target_mean": 390.0 / ratio,
                        "reached": "1/1", "wall_mean": 700.0}}
    (folder / "compare.json").write_text(json.dumps({"rows": rows, "summary": summary, "ratio": ratio,
                                                     "wall_ratio": 0.6}))
    (folder / "ours-0").mkdir()
    (folder / "ours-0" / "run.json").write_text(json.dumps(
        {"cpu_info": {"model_name": "AMD EPYC", "family": family, "model": model}}))
    (folder / "ours-0" / "x_pytorch.json").write_text(json.dumps({"timestamp": "2026-11-24"}))
    return folder / "compare.json"


def _run_on(folder: Path, seconds: float, family: str, model: str) -> Path:
    run = write_run(folder, 0, [(8, seconds, 0.941)])
    data = json.loads((run / "run.json").read_text())
    data["cpu_info"] = {"model_name": "AMD EPYC", "family": family, "model": model}
    (run / "run.json").write_text(json.dumps(data))
    return run


def test_a_cpu_run_is_placed_against_the_port_by_the_ratio_measured_beside_it(tmp_path, capsys):
    """The port's row is this run's time / compare.py's ratio (0.6 here: ours
    faster), not 834 s from another machine and day."""
    compare = _compare(tmp_path / "cmp", 0.6)
    run = _run_on(tmp_path / "run", 380.0, "26", "2")
    assert main(["leaderboard", str(run), "--compare", str(compare), "--out", str(tmp_path / "o")]) == 0
    data = json.loads((tmp_path / "o" / "leaderboard.json").read_text())
    entries = [e["entry"] for e in data["table"]]
    port = entries.index("airbench94_muon ported to this CPU, side by side (compare.py)")
    assert port == entries.index("this run") + 1 and data["rank"] == 8 and data["of"] == 9
    row = data["table"][port]
    assert row["time_seconds"] == pytest.approx(380.0 / 0.6)
    assert row["cpu"]["family"] == "26" and row["cpu"]["model"] == "2" and row["date"] == "2026-11-24"
    assert "this run / 0.600" in capsys.readouterr().out


def test_a_ratio_from_another_cpu_is_not_applied(tmp_path, capsys):
    compare = _compare(tmp_path / "cmp", 0.587, family="25", model="17")
    run = _run_on(tmp_path / "run", 380.0, "26", "2")
    assert main(["leaderboard", str(run), "--compare", str(compare), "--out", str(tmp_path / "o")]) == 0
    data = json.loads((tmp_path / "o" / "leaderboard.json").read_text())
    assert not any(e.get("kind") == "side by side" for e in data["table"])
    assert "measured on family 25 model 17, this run ran on family 26 model 2" in capsys.readouterr().out


def test_a_file_that_is_not_compare_json_is_one_line(tmp_path, capsys):
    bad = tmp_path / "compare.json"
    bad.write_text("{}")
    run = write_run(tmp_path / "run", 0, [(8, 640.0, 0.941)])
    assert main(["leaderboard", str(run), "--compare", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not compare.py's JSON" in err[0]
