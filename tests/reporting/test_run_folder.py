"""The default run folder: without --out every run gets a new,
named folder under runs/cifar10, so the README's main command runs twice in
a row; an --out that holds files is still refused without --overwrite."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from dawnbench_fast import cifar
from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.runner import cli


def resolved_out(argv: list[str], default: Path) -> Path:
    """--out as the CLI resolves it, with the default parent moved to ``default``."""
    args = cifar.build_parser().parse_args(argv)
    args.default_out = str(default)
    cli.check_run_args(args)
    return Path(args.out)


def test_the_default_command_twice_gets_two_folders(tmp_path):
    first = resolved_out([], tmp_path / "runs")
    assert first.parent == tmp_path / "runs" and first.name.endswith("-seed0")
    first.mkdir(parents=True)
    (first / "run.json").write_text("{}")  # the first run's results
    second = resolved_out([], tmp_path / "runs")  # refused if it were the same folder
    assert second != first and not second.exists()


def test_the_folder_is_named_by_utc_time_and_seeds(tmp_path):
    now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert cli.fresh_out(tmp_path, 3, now=now) == tmp_path / "20250102T030405Z-seed3"
    assert cli.fresh_out(tmp_path, 0, runs=5, now=now).name == "20250102T030405Z-seeds0-4"
    (tmp_path / "20250102T030405Z-seed3").mkdir()  # two runs in the same second
    assert cli.fresh_out(tmp_path, 3, now=now).name == "20250102T030405Z-seed3-2"


def test_an_explicit_out_is_kept_and_still_refused_when_full(tmp_path):
    out = tmp_path / "mine"
    assert resolved_out(["--out", str(out)], tmp_path / "runs") == out
    out.mkdir()
    (out / "run.json").write_text("{}")
    with pytest.raises(ConfigError, match="--overwrite"):
        resolved_out(["--out", str(out)], tmp_path / "runs")
