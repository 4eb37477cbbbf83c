"""What both trainers' command lines show a user: --help with
each default once and only the choices that work, --version, the usage line
naming ``evaluate``, --fail-below-target's exit status, and submission files
that never carry a made-up code URL."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re

import pytest
import torch
from support.cifar_data import cifar_dir

import dawnbench_fast
from dawnbench_fast import cifar, imagenet
from dawnbench_fast.execution import runtime
from dawnbench_fast.runner import cli, outcome
from dawnbench_fast.runner.outcome import MISSED_TARGET_STATUS

PARSERS = {"cifar": cifar.build_parser, "imagenet": imagenet.build_parser}
# The smallest CIFAR run the other CLI tests use (tests/reporting/test_run_files.py), one epoch.
TINY = ["--subset", "500", "--eval-subset", "200", "--epochs", "1", "--batch-size", "250",
        "--set", "widths=16,32,32", "--set", "whiten_images=500", "--latency-images", "5",
        "--no-progress", "--no-download", "--threads", "1"]


def help_of(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_help().split())  # argparse's line breaks out of the way


@pytest.mark.parametrize("name", list(PARSERS))
def test_help_states_each_default_once(name):
    parser = PARSERS[name]()
    text = help_of(parser)
    for silent in ("(default: None)", "(default: False)", "(default: [])", "(default: )"):
        assert silent not in text
    fmt = cli.HelpFormatter(parser.prog)
    for action in parser._actions:
        shown = fmt._get_help_string(action) or ""
        assert shown.count("default:") <= 1, action.dest
    # a flag whose help names its default gets no second one; the others keep theirs
    assert "8.5 for the default recipe) (default" not in text and "(default: 10000)" in text


def test_imagenet_help_offers_only_what_works_there():
    parser = imagenet.build_parser()
    text = help_of(parser)
    assert "lr_filters" not in text and "--set lr_per_256=" in text  # an ImageNet field
    assert "{auto,torch}" in text and "triton" not in text
    (kernels,) = [a for a in parser._actions if a.dest == "kernels"]
    assert tuple(kernels.choices) == imagenet.cli.KERNELS
    assert set(cifar.build_parser()._option_string_actions["--kernels"].choices) > {"cpu", "triton"}


@pytest.mark.parametrize("name", list(PARSERS))
def test_latency_tta_is_gone(name, capsys):
    assert "--latency-tta" not in help_of(PARSERS[name]())
    with pytest.raises(SystemExit) as e:
        PARSERS[name]().parse_args(["--latency-tta"])
    assert e.value.code == 2 and "--latency-tta" in capsys.readouterr().err


def test_usage_names_evaluate():
    usage = cifar.build_parser().format_usage()
    assert "evaluate PATH" in usage


@pytest.mark.parametrize("name", list(PARSERS))
def test_version(name, capsys):
    with pytest.raises(SystemExit) as e:
        PARSERS[name]().parse_args(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip().endswith(f" {dawnbench_fast.__version__}")


def test_exit_status_under_fail_below_target():
    missed, reached = {"tta_seconds": None}, {"tta_seconds": 12.5}
    flag = argparse.Namespace(fail_below_target=True)
    assert outcome.exit_status([reached, reached], flag) == 0
    assert outcome.exit_status([reached, missed], flag) == MISSED_TARGET_STATUS  # any run of --runs N
    assert outcome.exit_status([missed], argparse.Namespace(fail_below_target=False)) == 0
    assert MISSED_TARGET_STATUS not in (0, 1, 2, 130, 143)  # success, traceback, user error, ^C, SIGTERM


def test_submission_gaps_name_the_flags_not_given():
    args = cifar.cli.config_file.parse_args(cifar.build_parser(), ["--author", "Ada", "--code-url", "u"])
    assert [g.split()[0] for g in outcome.submission_gaps(args)] == ["--email", "--hardware"]
    # --author left at its default is a gap, though the default is not empty
    args = cifar.cli.config_file.parse_args(cifar.build_parser(), ["--code-url", "u"])
    assert [g.split()[0] for g in outcome.submission_gaps(args)] == ["--author", "--email", "--hardware"]
    every = argparse.Namespace(given={"author", "code_url", "email", "hardware"})
    assert outcome.submission_line(every) is None


@pytest.fixture(scope="module")
def missed_run(tmp_path_factory):
    """A tiny run that cannot reach its target, with --fail-below-target and no
    submission flags: (exit status, stdout, stderr, run folder). In-process
    (no interpreter start-up); capsys is per test, so the streams are redirected."""
    out = tmp_path_factory.mktemp("missed") / "run"
    threads = torch.get_num_threads()
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = cifar.main([*TINY, "--target", "0.99", "--fail-below-target", "--data-dir",
                               str(cifar_dir()), "--out", str(out)])
    finally:
        runtime.set_threads(threads)  # --threads 1 is process-wide
    return code, stdout.getvalue(), stderr.getvalue(), out


def test_a_missed_target_exits_3_with_the_flag(missed_run):
    code, _, err, out = missed_run
    assert code == MISSED_TARGET_STATUS, err
    assert "missed the target: 1 of 1 run(s) never reached 99.00%" in err
    assert json.loads((out / "run.json").read_text())["result"]["tta_seconds"] is None


def test_no_placeholder_url_in_a_submission(missed_run):
    code, stdout, _, out = missed_run
    files = sorted(out.glob("*.json"))
    assert len(files) >= 3  # training and inference JSON, run.json
    for path in files:
        assert "dawnbench-fast/dawnbench_fast" not in path.read_text(), path
    for path in out.glob("*_pytorch*.json"):
        assert json.loads(path.read_text())["codeURL"] == "", path
    # the summary says what a submission still lacks
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith("not yet a DAWNBench submission")]
    for flag in ("--code-url", "--author", "--email", "--hardware"):
        assert flag in line
    assert line in (out / "report.txt").read_text().splitlines()  # the summary as kept, too
    assert not re.search(r"github\.com/dawnbench", stdout)
