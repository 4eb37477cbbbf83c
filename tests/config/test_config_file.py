"""--config FILE (dawnbench_fast.config.config_file): what --show-config printed
comes back as the same config; flags given beside the file override it (even
when they name a default value), --set last; a bad file is one line naming
the file and the field, exit 2, before any data is read, nothing written.
The round trip through a real run's run.json is in tests/reporting/test_run_files.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cifar_data import cifar_dir

from dawnbench_fast import cifar
from dawnbench_fast.cifar import cli as cifar_cli
from dawnbench_fast.config import config_file

RECIPE = ["--recipe", "hiverge", "--seed", "3", "--epochs", "5", "--set", "lr_head=0.5",
          "--set", "widths=32,64,64", "--set", "progressive=24,24", "--eval-every", "2", "--no-download"]
BASE = ["--no-progress", "--latency-images", "0"]


def show_config(args: list[str], capsys) -> str:
    assert cifar.main([*args, "--show-config"]) == 0
    return capsys.readouterr().out


def test_show_config_output_comes_back_the_same(tmp_path, capsys):
    printed = show_config(RECIPE, capsys)
    (tmp_path / "cfg.json").write_text(printed)
    again = show_config(["--config", str(tmp_path / "cfg.json")], capsys)
    assert again == printed
    cfg = json.loads(again)  # the file's values, not the default recipe's
    assert (cfg["seed"], cfg["epochs"], cfg["batch_size"], cfg["act"]) == (3, 5, 1536, "silu")
    assert cfg["widths"] == [32, 64, 64] and cfg["progressive"] == [24, 24]
    assert cfg["extra"] == {"recipe": "hiverge"} and cfg["download"] is False
    # the same object, not only the same JSON: tuples are tuples again, ints stay ints
    args = config_file.parse_args(cifar.build_parser(), ["--config", str(tmp_path / "cfg.json")])
    assert cifar.config_from_args(args) == cifar.config_from_args(cifar.build_parser().parse_args(RECIPE))


def test_flags_given_beside_the_file_override_it(tmp_path, capsys):
    (tmp_path / "cfg.json").write_text(show_config(RECIPE, capsys))
    cfg = json.loads(show_config(["--config", str(tmp_path / "cfg.json"), "--seed", "0", "--epochs", "8",
                                  "--set", "lr_head=0.25", "--set", "seed=1", "--threads", "1"], capsys))
    # --seed 0 is the parser's default, and still overrides the file's 3 (then --set seed=1, last)
    assert (cfg["seed"], cfg["epochs"], cfg["lr_head"], cfg["threads"]) == (1, 8, 0.25, 1)
    # flags not given keep the file's values, not the parser's defaults
    assert (cfg["batch_size"], cfg["eval_every"], cfg["lr_filters"]) == (1536, 2, 0.205)


def test_which_flags_were_given():
    args = config_file.parse_args(cifar.build_parser(), ["--seed", "0", "--no-download", "--set", "x=1"])
    assert {"seed", "no_download"} <= args.given and not {"epochs", "target", "recipe", "set"} & args.given
    assert args.seed == 0 and args.set == ["x=1"] and args.target == 0.94  # parsed as without the probe


def test_a_summary_json_gives_its_base_config(tmp_path, capsys):
    printed = show_config(RECIPE, capsys)
    (tmp_path / "summary.json").write_text(json.dumps({"config": json.loads(printed), "runs": []}))
    assert show_config(["--config", str(tmp_path / "summary.json")], capsys) == printed


def write(text: str):
    def make(tmp: Path) -> str:
        (tmp / "cfg.json").write_text(text)
        return str(tmp / "cfg.json")
    return make


def run_json_folder(tmp: Path) -> str:
    (tmp / "run.json").write_text(json.dumps({"config": {"epochs": 8}}))
    return str(tmp)


BAD = {
    "unknown-field": (write('{"epochs": 8, "lr_everything": 0.1}'), ("unknown field 'lr_everything'",
                                                                     "--show-config lists")),
    "unknown-field-in-run-json": (write('{"schema_version": 2, "config": {"tta": 2}}'),
                                  ("unknown field 'tta'",)),
    "wrong-type": (write('{"epochs": "eight"}'), ("field 'epochs'", '"eight"', "expected a number")),
    "wrong-bool": (write('{"flip": 1}'), ("field 'flip'", "expected true or false")),
    "wrong-tuple": (write('{"widths": "64,256,256"}'), ("field 'widths'", "a list of integers")),
    "out-of-range": (write('{"tta_level": 7}'), ("field tta_level=7", "must be 0, 1 or 2")),
    "flag-field-out-of-range": (write('{"epochs": 0}'), ("field epochs=0", "must be > 0")),
    "not-json": (write('{"epochs": 8,'), ("not JSON", "line 1")),
    "not-an-object": (write("[8, 2000]"), ("expected a JSON object",)),
    "missing": (lambda tmp: str(tmp / "nope.json"), ("no such file", "--show-config")),
    "a-folder": (run_json_folder, ("is a folder", "run.json")),
}


def tripwire(*args, **kwargs):
    raise AssertionError("the data was read before the error")


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_file_is_one_line_and_exit_2(name, tmp_path, capsys, monkeypatch):
    make, needles = BAD[name]
    path = make(tmp_path)
    monkeypatch.setattr(cifar_cli, "load_cifar10", tripwire)
    out = tmp_path / "out"
    code = cifar.main([*BASE, "--data-dir", str(cifar_dir()), "--out", str(out), "--config", path])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{cifar.PROG}: error: --config {path}"), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not out.exists()


def test_recipe_beside_a_config_file_is_refused(tmp_path, capsys):
    (tmp_path / "cfg.json").write_text(show_config(RECIPE, capsys))
    code = cifar.main(["--config", str(tmp_path / "cfg.json"), "--recipe", "airbench94_muon",
                       "--show-config"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "--recipe" in lines[0] and "--set" in lines[0]
