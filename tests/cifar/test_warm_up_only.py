"""``python -m dawnbench_fast.cifar --warm-up-only JSON [--synthetic-data]``:
the trainer's own warm-up alone, on random images of CIFAR-10's shapes
(what fills the compile caches before the real data has arrived), one JSON
written; nothing trained, no data file read. On the CPU at tiny sizes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dawnbench_fast.cifar import cli
from dawnbench_fast.data import cifar10
from dawnbench_fast.runner import runs

TINY = ["--subset", "256", "--eval-subset", "128", "--epochs", "1", "--batch-size", "64",
        "--set", "whiten_images=256", "--device", "cpu", "--no-download"]


def test_synthetic_data_has_cifar10s_shapes_and_is_seeded():
    a, b, c = cifar10.synthetic_cifar10(0), cifar10.synthetic_cifar10(0), cifar10.synthetic_cifar10(1)
    assert a.train_images.shape == (50_000, 32, 32, 3) and a.test_images.shape == (10_000, 32, 32, 3)
    assert a.train_images.dtype == np.uint8 and a.train_labels.dtype == np.int64
    assert set(np.unique(a.test_labels)) == set(range(10))
    assert np.array_equal(a.train_images[:64], b.train_images[:64])
    assert not np.array_equal(a.train_images[:64], c.train_images[:64])


def test_warm_up_only_runs_the_trainers_warm_up_and_writes_its_record(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAWNBENCH_DATA", str(tmp_path / "no-data-here"))  # any file read would fail
    warmed = []
    real = runs.warm_up

    def counting(task):
        warmed.append(task.cfg.seed)
        real(task)

    monkeypatch.setattr(runs, "warm_up", counting)
    out, record = tmp_path / "out", tmp_path / "warm.json"
    assert cli.main([*TINY, "--warm-up-only", str(record), "--synthetic-data", "--out", str(out)]) == 0
    assert warmed == [runs.WARMUP_SEED]  # the trainer's warm-up, once, on its throwaway task
    rec = json.loads(record.read_text())
    assert rec["synthetic_data"] is True and rec["warmup_s"] > 0 and rec["device"] == "cpu"
    assert rec["execution"]["compile"] is False and rec["compile_mode"] is None  # the CPU: no compile
    assert rec["step"]["captured"] is False and rec["step"]["eager_why"]  # run.json's step record
    assert not out.exists()  # nothing trained, nothing written there
    assert "warm-up:" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "needle"), [
    (["--synthetic-data"], "--synthetic-data"),
    (["--warm-up-only", "W", "--runs", "2"], "--warm-up-only"),
    (["--warm-up-only", "/no/such/folder/w.json", "--synthetic-data"], "--warm-up-only"),
])
def test_bad_warm_up_flags_are_one_line_naming_the_flag(tmp_path, capsys, args, needle):
    args = [a if a != "W" else str(tmp_path / "w.json") for a in args]
    assert cli.main([*TINY, *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "o").exists() and not (tmp_path / "w.json").exists()
