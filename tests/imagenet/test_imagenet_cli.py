"""The ImageNet trainer (dawnbench_fast.imagenet): a smoke run on a generated
10-class ImageFolder at 64 px with a tiny ResNet that learns and writes every
report, its one-line errors, and the recipe's schedule and resolutions
against FFCV's published rules."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dawnbench_fast import imagenet
from dawnbench_fast.data.imagenet.synthetic import make_image_folder
from dawnbench_fast.imagenet.recipe import RECIPES, ImageNetRecipe, train_resolution, validate
from dawnbench_fast.optim.schedule import warmup_linear_decay
from dawnbench_fast.training import checkpoint

# A tiny ResNet-18 at 64 px, fp32 (no bf16 rounding), 10 classes of 24 training images:
# 5 steps of 48 per epoch.
TINY = ["--set", "arch=resnet18", "--set", "width=8", "--set", "min_res=64", "--set", "max_res=64",
        "--set", "val_res=64", "--set", "warmup_epochs=1", "--set", "lr_per_256=1.0",
        "--batch-size", "48", "--precision", "fp32", "--threads", "2", "--no-progress"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_image_folder(tmp_path_factory.mktemp("imagenet"), classes=10, train_per_class=24,
                             val_per_class=5, size=72)


@pytest.mark.e2e
def test_smoke_run_learns_and_writes_the_dawnbench_files(folder, tmp_path, capsys):
    out = tmp_path / "run"
    code = imagenet.main(["--data-dir", str(folder), "--epochs", "4", "--eval-every", "2",
                          "--latency-images", "8", "--out", str(out), "--save-model", str(tmp_path / "m.pt"),
                          *TINY])
    assert code == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "top-5" in printed and "target 93.00% top-5" in printed
    log = [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines()]
    losses = [e["train_loss"] for e in log]
    assert len(losses) == 4 and losses[-1] < 0.8 * losses[0], losses  # it learns
    run = json.loads((out / "run.json").read_text())
    res = run["result"]
    assert run["world"]["world_size"] == 1 and run["world"]["launcher"] is None
    assert run["kernels_backend"] == "torch" and run["ops"] == {}
    assert run["data"]["classes"] == 10 and run["data"]["train_images"] == 240
    assert res["target_metric"] == "top5" and 0.0 <= res["final_top1"] <= res["final_top5"] <= 1.0
    assert [e["epoch"] for e in res["epochs"]] == [2, 4] and res["epochs"][-1]["tta"] is True
    assert res["latency_images"] == 8 and res["latency_ms"] > 0
    assert set(res["train_split_seconds"]) == {"data", "forward", "backward", "optimizer"}
    stem = "dawnbench-fast_ResNet-18-w8-blurpool_" + run["hardware"].replace(", ", "-").replace(" ", "-")
    (tsv,) = out.glob("*.tsv")
    assert tsv.read_text().splitlines()[0] == "epoch\thours\ttop1Accuracy\ttop5Accuracy"
    assert tsv.name.startswith(stem[:40])
    (inference,) = out.glob("*_inference.json")
    inf = json.loads(inference.read_text())
    assert inf["top5Accuracy"] == round(100 * res["final_top5"], 2) and inf["latency"] == res["latency_ms"]
    assert inf["misc"]["valid"] is (res["final_top5"] >= 0.93) and "model" in inf
    train_json = json.loads(tsv.with_suffix(".json").read_text())
    assert train_json["model"] == "ResNet-18-w8-blurpool" and "Nesterov" in train_json["misc"]["optimizer"]
    assert (out / "report.html").exists() and (out / "checkpoint.pt").exists()

    # the saved weights and the run checkpoint rebuild the trained net
    net = imagenet.load_model(tmp_path / "m.pt")
    assert net.fc.out_features == 10 and not net.training
    saved = torch.load(out / "checkpoint.pt", weights_only=True)
    saved = checkpoint.load_run(out / "checkpoint.pt", saved["config"])  # the file's own checks
    task = imagenet.Config(**saved["config"]).build_task(torch.device("cpu"))
    task.load_state_dict(saved["task"])
    pairs = zip(task.net.state_dict().values(), net.state_dict().values(), strict=True)
    assert task.step == 20 and all(torch.equal(a, b) for a, b in pairs)


@pytest.mark.parametrize("argv, message", [
    # --kernels offers only auto and torch (argparse refuses the rest); a --set gets this line
    (["--set", "kernels=cpu"], "--kernels cpu: the ImageNet ResNet uses no op of the kernel catalogue"),
    (["--set", "arch=resnet9"], "--set arch=resnet9: must be one of"),
    (["--epochs", "16"], "--set res_ramp=(29, 34): ends after the run's 16 epochs"),
    (["--set", "subset=100"], "leave subset and eval_subset at 0"),
])
def test_bad_settings_are_one_line(folder, tmp_path, capsys, argv, message):
    assert imagenet.main(["--data-dir", str(folder), "--out", str(tmp_path / "x"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_a_missing_or_empty_split_is_one_line(tmp_path, capsys):
    assert imagenet.main(["--data-dir", str(tmp_path), "--out", str(tmp_path / "o"), *TINY]) == 2
    assert "no train/ folder there (expected train/<synset>/<image>" in capsys.readouterr().err
    (tmp_path / "train" / "n0").mkdir(parents=True)
    assert imagenet.main(["--data-dir", str(tmp_path), "--out", str(tmp_path / "o"), *TINY]) == 2
    assert "n0: no image files" in capsys.readouterr().err


def test_show_config_and_named_recipes(capsys):
    assert imagenet.main(["--show-config", "--recipe", "ffcv_rn18_16"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert (cfg["arch"], cfg["epochs"], cfg["res_ramp"]) == ("resnet18", 16, [11, 13])
    assert cfg["kernels"] == "torch"
    for fields in RECIPES.values():
        validate(imagenet.Config(**fields))  # every named recipe is valid as is
    assert ImageNetRecipe(batch_size=4096).peak_lr == pytest.approx(1.7)  # FFCV's lr at 8 x 512


def test_resolution_is_ffcvs_ramp():
    def ffcv(epoch, lo=160, hi=192, start=29, end=34):  # FFCV's get_resolution, as published
        if epoch <= start:
            return lo
        if epoch >= end:
            return hi
        return int(np.round(np.interp([epoch], [start, end], [lo, hi])[0] / 32)) * 32

    cfg = ImageNetRecipe()
    assert [train_resolution(cfg, e) for e in range(40)] == [ffcv(e) for e in range(40)]
    assert [train_resolution(cfg, e) for e in (0, 29, 31, 32, 39)] == [160, 160, 160, 192, 192]


def test_schedule_is_ffcvs_triangle_per_step():
    steps_per_epoch, epochs, peak = 7, 5, 2
    for step in range(steps_per_epoch * epochs):
        epoch = step / steps_per_epoch  # FFCV: per-step interpolation of its per-epoch values
        ffcv = np.interp(epoch, [0, peak, epochs], [1e-4, 1.0, 0.0])
        assert warmup_linear_decay(step, peak * steps_per_epoch, epochs * steps_per_epoch) == \
            pytest.approx(ffcv, abs=1e-12)
