"""``analyze lesion``: the arms (each lever's switch, the recipe's differences
from airbench94_muon found from RECIPES), their effects against the baseline,
and "not reached". Training is a fake launch."""

from __future__ import annotations

import json

import pytest
from support.analyze_fixtures import fake_launch, flag, sets, write_run

from dawnbench_fast.analyze import lesion, training_runs
from dawnbench_fast.analyze.__main__ import main
from dawnbench_fast.cifar.recipe import RECIPES, CifarRecipe


def test_airbench_with_selective_tta_has_one_lever_against_airbench():
    arms = lesion.recipe_arms("airbench94_tta")
    assert [(a.name, a.flags) for a in arms] == [("recipe_tta_below", ["--set", "tta_below=1.0"])]
    assert lesion.recipe_arms("airbench94_muon") == []


def test_every_field_the_default_changes_from_airbench_is_an_arm_and_all_of_them_one_more():
    *fields, every = lesion.recipe_arms("dawnbench_fast")
    names = {a.name.removeprefix("recipe_") for a in fields}
    default = CifarRecipe()
    differing = {k for k, v in RECIPES["airbench94_muon"].items() if getattr(default, k) != v}
    assert names == differing and "act" in names and "tta_below" in names
    assert every.name == "recipe_all" and every.flags == [f for a in fields for f in a.flags]


def test_each_arm_switches_its_lever_and_nothing_else():
    base = ["--no-progress"]
    configs = training_runs.check_plan(base, lesion.lever_arms("dawnbench_fast"))
    baseline = configs.pop(lesion.BASELINE)
    expected = {"kernels_torch": {"kernels": "torch"}, "fp32": {"precision": "fp32"},
                "no_channels_last": {"channels_last": False}, "no_tta": {"tta_level": 0},
                "no_label_smoothing": {"label_smoothing": 0.0}, "muon_no_orthogonalisation": {"ns_steps": 0},
                "muon_to_sgd": {"filter_optimizer": "sgd"}, "random_flip": {"flip_alternating": False},
                "no_flip": {"flip": False}, "no_whitening": {"first_conv": "learned"},
                "wgrad_onednn": {"conv_wgrad": "aten"}, "wgrad_no_pooled": {"conv_wgrad": "dpbf16"},
                "dgrad_onednn": {"conv_dgrad": "aten"}}
    default = CifarRecipe()
    expected |= {f"recipe_{k}": {k: v} for k, v in RECIPES["airbench94_muon"].items()
                 if getattr(default, k) != v}
    # every field at once: the published recipe's config, field for field
    expected["recipe_all"] = {k: v for k, v in vars(CifarRecipe(**RECIPES["airbench94_muon"])).items()
                              if v != getattr(default, k)}
    assert set(configs) == set(expected)
    for name, cfg in configs.items():
        changed = {k: v for k, v in vars(cfg).items() if v != getattr(baseline, k)}
        assert changed == expected[name], name


def rows_for(argv):
    # label smoothing off never reaches the target; fp32 is slower; the rest as the baseline
    if sets(argv).get("label_smoothing") == "0":
        return [(1, 10.0, 0.5), (2, 20.0, 0.9)]
    slow = 2.0 if sets(argv).get("precision") == "fp32" else 1.0
    return [(1, 10.0 * slow, 0.5), (2, 20.0 * slow, 0.95)]


def test_effects_against_the_baseline(tmp_path, monkeypatch, capsys):
    calls: list = []
    monkeypatch.setattr(training_runs, "launch_trainer", fake_launch(rows_for, calls))
    out = tmp_path / "o"
    assert main(["lesion", "--arms", "fp32,no_label_smoothing", "--runs", "2", "--out", str(out)]) == 0
    # the baseline always runs; 3 arms x 2 seeds, each seed in every arm
    assert [(flag(c, "--seed"), flag(c, "--out").rsplit("/", 1)[1]) for c in calls][:2] == \
        [("0", "baseline-s0"), ("1", "baseline-s1")]
    assert len(calls) == 6 and all(flag(c, "--target") == "0.93" for c in calls)
    data = json.loads((out / "lesion.json").read_text())
    arms = {a["arm"]: a for a in data["arms"]}
    assert arms["fp32"]["effect"]["time_to_target_s"] == 20.0
    assert arms["fp32"]["effect"]["time_to_target_pct"] == 100.0
    ls = arms["no_label_smoothing"]
    assert ls["reached"]["reached"] == 0 and ls["effect"]["time_to_target_s"] is None
    assert ls["effect"]["final_top1_points"] == pytest.approx(-5.0)
    text = capsys.readouterr().out
    assert "not reached" in text and "below DAWNBench's 94%" in text
    assert (out / "lesion.png").stat().st_size > 1000


def test_an_arm_a_trainer_flag_already_switched_off_is_dropped(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(training_runs, "launch_trainer", fake_launch(rows_for, calls))
    out = tmp_path / "o"
    assert main(["lesion", "--arms", "kernels_torch,fp32", "--runs", "1", "--out", str(out),
                 "--", "--kernels", "torch"]) == 0
    data = json.loads((out / "lesion.json").read_text())
    assert [a["arm"] for a in data["arms"]] == ["baseline", "fp32"]
    assert data["dropped_as_baseline"] == ["kernels_torch"]


def test_from_needs_a_baseline(tmp_path, capsys):
    write_run(tmp_path / "r" / "fp32-s0", 0, [(1, 1.0, 0.95)])
    assert main(["lesion", "--from", str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 2
    assert "no baseline arm" in capsys.readouterr().err


def test_unknown_arm_is_refused(capsys):
    assert main(["lesion", "--arms", "fp33", "--list-arms"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "unknown arm fp33" in err and "fp32" in err
