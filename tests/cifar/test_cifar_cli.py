"""The command line: a smoke run's files, --help, and one-line errors."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.cifar_data import cifar_dir

from dawnbench_fast import cifar
from dawnbench_fast.cifar.recipe import apply_overrides
from dawnbench_fast.config.overrides import ConfigError

SMOKE = ["--subset", "2000", "--set", "whiten_images=2000", "--epochs", "1", "--eval-subset", "500",
         "--latency-images", "20",
         "--no-progress", "--threads", "2", "--latency-one-view"]


def run_cli(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "DAWNBENCH_DATA": str(cifar_dir()), **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "dawnbench_fast.cifar", *args],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    model = out / "model.pt"
    r = run_cli(*SMOKE, "--out", str(out), "--cost-per-hour", "3.06", "--save-model", str(model))
    assert r.returncode == 0, r.stderr
    return out, model, r.stdout


@pytest.mark.e2e
def test_smoke_run_writes_dawnbench_files(smoke_run):
    out, _, stdout = smoke_run
    stems = {p.name for p in out.iterdir()}
    tsv = [p for p in out.iterdir() if p.suffix == ".tsv"]
    assert len(tsv) == 1
    stem = tsv[0].stem
    assert re.fullmatch(r"[^_]+_[^_]+_[^_]+_pytorch", stem)  # [author]_[model]_[hw]_[framework]
    assert {f"{stem}.json", f"{stem}_inference.json", "run.json"} <= stems
    rows = list(csv.reader(tsv[0].open(), delimiter="\t"))
    assert rows[0] == ["epoch", "hours", "top1Accuracy"]
    assert len(rows) == 2 and rows[1][0] == "1"
    assert 0 < float(rows[1][1]) < 1 and 0 <= float(rows[1][2]) <= 100
    train = json.loads((out / f"{stem}.json").read_text())
    for key in ("version", "author", "authorEmail", "framework", "codeURL", "model", "hardware",
                "costPerHour", "timestamp", "logFilename", "misc"):
        assert key in train, key
    assert train["version"] == "v1.0" and train["costPerHour"] == 3.06
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", train["timestamp"])
    assert train["logFilename"] == tsv[0].name
    inf = json.loads((out / f"{stem}_inference.json").read_text())
    assert inf["latency"] > 0 and 0 <= inf["top1Accuracy"] <= 100
    assert inf["cost"] == pytest.approx(3.06 * inf["latency"] / 3.6e6)
    assert inf["misc"]["cost_per_10000_images"] == pytest.approx(1e4 * inf["cost"])
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["subset"] == 2000 and run["config"]["epochs"] == 1
    assert run["versions"]["torch"] and run["threads"] == 2 and run["command"][1:3] == ["-m",
                                                                                       "dawnbench_fast.cifar"]
    assert "sha" in run["git"] and run["kernels_backend"] in ("cpu", "torch")
    res = run["result"]
    assert res["latency_images"] == 20 and res["phases_seconds"]["train"] > 0
    assert {"data_load", "warmup", "init", "train", "latency"} <= set(res["phases_seconds"])
    assert "DAWNBench CIFAR-10 report" in stdout and "where the time goes" in stdout
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp files left


@pytest.mark.e2e
def test_saved_model_round_trips(smoke_run):
    out, model_path, _ = smoke_run
    model = cifar.load_model(model_path)
    assert not model.training
    r = run_cli("evaluate", str(model_path), "--eval-subset", "500", "--tta-level", "0")
    assert r.returncode == 0, r.stderr
    run = json.loads((out / "run.json").read_text())
    acc = float(re.search(r"top-1 ([\d.]+)%", r.stdout).group(1))
    # Same weights, same 500 images, same (untranslated) view as the inference
    # entry's labelled one-view figure (its own figure is the selective-TTA procedure's).
    assert acc == pytest.approx(run["result"]["inference_one_view"]["top1Accuracy"], abs=0.21)


def test_help_documents_every_flag():
    r = run_cli("--help")
    assert r.returncode == 0
    parser = cifar.build_parser()
    flags = {s for a in parser._actions for s in a.option_strings}
    for flag in flags:
        assert flag in r.stdout, flag
    for a in parser._actions:
        assert a.help, a.option_strings
    assert "evaluate" in r.stdout


def main_in_process(args: list[str], capsys, monkeypatch, out: Path | None = None) -> tuple[int, list[str]]:
    """Run the CLI's main() here (no interpreter start-up) and capture stderr.
    With ``out``, a training command writes there, not into ./runs/cifar10
    (which a user's earlier run may have filled: the --out check would answer first)."""
    monkeypatch.setenv("DAWNBENCH_DATA", str(cifar_dir()))
    if out is not None and args[:1] != ["evaluate"]:
        args = [*args, "--out", str(out)]
    try:
        code = cifar.main(args)
    except SystemExit as e:  # argparse errors
        code = e.code
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("args,needle", [
    (["--epochs", "x"], "--epochs"),
    (["--bogus"], "--bogus"),
    (["--kernels", "magic"], "--kernels"),
    (["--set", "nope=1"], "nope"),
    (["--set", "lr_filters=abc"], "lr_filters"),
    (["--set", "tta_level=7"], "tta_level"),
    (["--runs", "0"], "--runs"),
    (["--data-dir", "/nonexistent"], "--data-dir"),
    (["--subset", "60000", "--latency-images", "0"], "--subset"),
    (["evaluate", "/nonexistent/model.pt"], "/nonexistent/model.pt"),
    (["evaluate"], "path"),
])
def test_bad_input_is_one_line_and_nonzero(args, needle, capsys, monkeypatch, tmp_path):
    code, lines = main_in_process(args, capsys, monkeypatch, tmp_path / "out")
    assert code == 2
    assert len(lines) == 1, lines
    assert needle in lines[0] and "error" in lines[0]


def test_bad_flag_from_the_shell_is_one_line():
    r = run_cli("--epochs", "x")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args,needle", [
    (["--kernels", "cuda"], "--kernels cuda"),
    (["--device", "cuda"], "--device cuda"),
])
def test_what_this_machine_cannot_run_is_a_one_line_error(args, needle, capsys, monkeypatch, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    code, lines = main_in_process([*args, *SMOKE], capsys, monkeypatch, tmp_path / "out")
    assert code == 2 and len(lines) == 1 and needle in lines[0], lines


def test_set_overrides_fields():
    cfg = apply_overrides(cifar.Config(), ["lr_filters=0.2", "tta_level=0", "widths=8,16,32",
                                                 "flip=false"])
    assert (cfg.lr_filters, cfg.tta_level, cfg.widths, cfg.flip) == (0.2, 0, (8, 16, 32), False)
    # epochs and whiten_bias_epochs are declared float (their defaults are whole numbers)
    cfg = apply_overrides(cifar.Config(), ["epochs=7.63", "whiten_bias_epochs=0.19", "ns_steps=4"])
    assert (cfg.epochs, cfg.whiten_bias_epochs, cfg.ns_steps) == (7.63, 0.19, 4)
    with pytest.raises(ConfigError, match="--set ns_steps=4.5: expected int"):
        apply_overrides(cifar.Config(), ["ns_steps=4.5"])


def test_a_named_recipe_gives_its_values_and_flags_win_over_them():
    args = cifar.build_parser().parse_args(["--recipe", "hiverge"])
    assert (cifar.config_from_args(args).batch_size, cifar.config_from_args(args).epochs) == (1536, 7.63)
    args = cifar.build_parser().parse_args(["--recipe", "hiverge", "--batch-size", "1000", "--epochs", "8"])
    cfg = cifar.config_from_args(args)
    assert (cfg.batch_size, cfg.epochs, type(cfg.epochs), cfg.act) == (1000, 8, int, "silu")
    assert cifar.config_from_args(cifar.build_parser().parse_args([])).batch_size == 1536
    args = cifar.build_parser().parse_args(["--recipe", "airbench94_muon"])
    assert (cifar.config_from_args(args).batch_size, cifar.config_from_args(args).act) == (2000, "gelu")


def test_show_config_prints_the_resolved_config():
    r = run_cli("--show-config", "--set", "label_smoothing=0.1")
    assert r.returncode == 0
    assert json.loads(r.stdout)["label_smoothing"] == 0.1


def test_package_is_runnable_from_anywhere(tmp_path):
    r = subprocess.run([sys.executable, "-c", "import dawnbench_fast.kernels, dawnbench_fast.roofline,"
                        " dawnbench_fast.csrc; print('ok')"], cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    assert Path(cifar.__file__).parent.name == "cifar"
