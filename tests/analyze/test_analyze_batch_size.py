"""``analyze batch-size``: the learning-rate rule (only Muon's rate moves, the
summed loss already scales the SGD steps), the flags each size is trained
with, the figures read back, and --sizes' checks. Training is a fake launch."""

from __future__ import annotations

import json
import math

import pytest
from support.analyze_fixtures import fake_launch, flag, sets, write_run

from dawnbench_fast.analyze import batch_size, training_runs
from dawnbench_fast.analyze.__main__ import main
from dawnbench_fast.cifar.recipe import CifarRecipe
from dawnbench_fast.config.overrides import ConfigError


@pytest.mark.parametrize("rule, expected", [("sqrt", 0.24 * math.sqrt(512 / 2000)),
                                            ("linear", 0.24 * 512 / 2000), ("none", 0.24)])
def test_lr_rule(rule, expected):
    assert batch_size.scaled_lrs(0.24, 2000, 512, rule) == {"lr_filters": pytest.approx(expected)}
    assert batch_size.scaled_lrs(0.24, 2000, 2000, rule) == {"lr_filters": pytest.approx(0.24)}


def test_each_size_changes_only_the_batch_and_muons_rate():
    base = ["--no-progress"]
    base_cfg = training_runs.resolve_config(base)
    arms = batch_size.arms(base, (256, 2000), "sqrt")
    assert [a.name for a in arms] == ["batch256", "batch2000"]
    for arm, b in zip(arms, (256, 2000), strict=True):
        cfg = training_runs.resolve_config(base + arm.flags)  # what the trainer would run
        assert cfg.batch_size == b
        assert cfg.lr_filters == pytest.approx(base_cfg.lr_filters * math.sqrt(b / base_cfg.batch_size))
        # per-example rates (summed loss): the trainer's step scales with the batch by itself
        for name in ("lr_bias", "lr_head", "weight_decay", "muon_weight_decay", "epochs"):
            assert getattr(cfg, name) == getattr(base_cfg, name), name


def test_the_rule_starts_from_the_recipes_own_batch():
    # hiverge's recipe trains at batch 1536 with lr_filters 0.205
    (arm,) = batch_size.arms(["--recipe", "hiverge"], (768,), "linear")
    assert float(arm.flags[arm.flags.index("--set") + 1].split("=")[1]) == pytest.approx(0.205 / 2)


def rows_for(argv):
    # bigger batches: fewer epochs' worth of progress, so later to 93%
    b = int(flag(argv, "--batch-size"))
    return [(1, 10.0, 0.80), (2, 20.0, 0.935 if b <= 512 else 0.92), (3, 30.0, 0.94 if b <= 1024 else 0.925)]


def test_study_reads_epochs_time_and_throughput(tmp_path, monkeypatch, capsys):
    calls: list = []
    monkeypatch.setattr(training_runs, "launch_trainer", fake_launch(rows_for, calls))
    out = tmp_path / "o"
    assert main(["batch-size", "--sizes", "2000,512,1024", "--runs", "1", "--out", str(out)]) == 0
    assert [flag(c, "--batch-size") for c in calls] == ["512", "1024", "2000"]
    assert all(flag(c, "--eval-every") == "1" and flag(c, "--target") == "0.93" for c in calls)
    d = CifarRecipe()  # the default recipe's rate and batch: the rule scales from them
    assert [float(sets(c)["lr_filters"]) for c in calls] == pytest.approx(
        [d.lr_filters * math.sqrt(b / d.batch_size) for b in (512, 1024, 2000)])
    data = json.loads((out / "batch-size.json").read_text())
    by = {s["batch_size"]: s for s in data["sizes"]}
    assert by[512]["epochs_to_target"]["mean"] == 2 and by[512]["time_to_target_s"]["mean"] == 20.0
    assert by[1024]["epochs_to_target"]["mean"] == 3
    assert by[2000]["reached"]["reached"] == 0 and by[2000]["time_to_target_s"]["mean"] is None
    # all 50,000 images at batch 512: 97 steps an epoch x the fake run's 8 epochs x 512, over its 10 s
    assert by[512]["throughput_img_s"]["mean"] == pytest.approx(97 * 8 * 512 / 10.0)
    text = capsys.readouterr().out
    assert "below DAWNBench's 94%" in text and "not reached" in text and "sqrt" in text
    assert (out / "batch-size.png").stat().st_size > 1000


def test_from_groups_runs_by_their_batch(tmp_path):
    for b, seed in ((256, 0), (256, 1), (1024, 0)):
        write_run(tmp_path / "r" / f"batch{b}-s{seed}", seed, [(1, 5.0, 0.5), (2, 9.0 + seed, 0.95)],
                  batch_size=b, target=0.93)
    assert main(["batch-size", "--from", str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 0
    data = json.loads((tmp_path / "o" / "batch-size.json").read_text())
    assert [(s["batch_size"], s["reached"]["runs"]) for s in data["sizes"]] == [(256, 2), (1024, 1)]
    assert data["sizes"][0]["time_to_target_s"]["mean"] == 9.5 and data["lr_rule"] is None


@pytest.mark.parametrize("text, why", [("256,abc", "comma-separated"), ("0,256", ">= 1"),
                                       ("256,256", "repeated"), ("", "comma-separated")])
def test_bad_sizes(text, why):
    with pytest.raises(ConfigError, match=why):
        batch_size.parse_sizes(text)


def test_quick_keeps_the_sizes_and_the_recipes_reference_batch(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(training_runs, "launch_trainer", fake_launch(rows_for, calls))
    assert main(["batch-size", "--quick", "--sizes", "500", "--out", str(tmp_path / "o")]) == 0
    assert len(calls) == 2  # --quick's two runs
    for c in calls:
        assert flag(c, "--subset") == "2000" and flag(c, "--epochs") == "2" and flag(c, "--target") == "0.35"
        assert [c[i + 1] for i, x in enumerate(c) if x == "--batch-size"] == ["500"]  # no quick batch
        d = CifarRecipe()
        assert float(sets(c)["lr_filters"]) == pytest.approx(d.lr_filters * math.sqrt(500 / d.batch_size))
