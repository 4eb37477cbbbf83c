"""Bad input to the analyses, case by case, through their command line
(in-process): exit status 2, one line on stderr naming the flag or file,
nothing trained (the trainer launch is a tripwire) and ``--out`` untouched."""

from __future__ import annotations

import json

import pytest
from support.analyze_fixtures import write_run

from dawnbench_fast.analyze import training_runs
from dawnbench_fast.analyze.__main__ import main


@pytest.fixture(autouse=True)
def no_training(monkeypatch):
    def tripwire(argv, log):
        raise AssertionError(f"trained despite bad input: {argv}")

    monkeypatch.setattr(training_runs, "launch_trainer", tripwire)


def rowless(tmp_path):
    d = write_run(tmp_path / "rowless", 0, [(1, 1.0, 0.5)])
    run = json.loads((d / "run.json").read_text())
    run["result"]["epochs"] = []
    (d / "run.json").write_text(json.dumps(run))
    return str(d)


CASES = [
    (lambda t: ["stability", "--from", str(t / "nope")], "no such file or folder"),
    (lambda t: ["stability", "--from", rowless(t)], "no per-epoch rows"),
    (lambda t: ["thresholds", "--from", rowless(t)], "no per-epoch rows"),
    (lambda t: ["batch-size", "--sizes", "256,abc"], "--sizes 256,abc: expected comma-separated"),
    (lambda t: ["batch-size", "--sizes", "0,512"], "--sizes 0,512: batch sizes must be >= 1"),
    (lambda t: ["batch-size", "--sizes", "512,512"], "repeated"),
    (lambda t: ["thresholds", "--thresholds", "90,94"], "--thresholds 90,94: each must be a fraction"),
    (lambda t: ["stability", "--target", "94"], "--target 94.0: must be in (0, 1]"),
    (lambda t: ["lesion", "--runs", "0"], "--runs 0: must be >= 1"),
    (lambda t: ["leaderboard", str(t / "missing")], "missing: no such file or folder"),
    (lambda t: ["stability", "--resume", str(t / "gone")], "--resume"),
    (lambda t: ["stability", "--from", str(t), "--", "--kernels", "torch"], "no trainer flags"),
    (lambda t: ["stability", "--runs", "1", "--", "--set", "tta_level=7"], "tta_level=7"),
    (lambda t: ["batch-size", "--sizes", "256", "--", "--set", "nonsense=1"], "nonsense: unknown field"),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case):
    args, message = CASES[case]
    out = tmp_path / "out"
    assert main(_with_out(args(tmp_path), out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m dawnbench_fast.analyze: error: "), err
    assert message in err[0], err
    assert not out.exists()


def _with_out(argv: list[str], out) -> list[str]:
    """``argv`` with ``--out``, before the trainer flags after ``--`` if any."""
    i = argv.index("--") if "--" in argv else len(argv)
    return [*argv[:i], "--out", str(out), *argv[i:]]


def test_a_study_will_not_write_into_a_folder_of_results(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "stability.json").write_text("{}")
    src = write_run(tmp_path / "r", 0, [(1, 1.0, 0.95)])
    assert main(["stability", "--from", str(src), "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (out / "stability.json").read_text() == "{}"
    assert main(["stability", "--from", str(src), "--out", str(out), "--overwrite"]) == 0


def test_an_unknown_trainer_flag_stops_before_training(tmp_path, capsys):
    # the trainer's own parser, run in-process: its one-line error and exit status 2
    with pytest.raises(SystemExit) as e:
        main(["stability", "--runs", "1", "--out", str(tmp_path / "o"), "--", "--bogus"])
    assert e.value.code == 2 and "--bogus" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
