"""The files a user keeps from a run: the DAWNBench submission
fields set from flags, the per-epoch JSON-lines log, the accuracy plot and
the HTML report, and run.json's config read back by --config.

One tiny run (500 images, narrow net, 2 epochs, an evaluation after each)
in-process, shared by the tests of this module: a few seconds in all. It
runs with --tensorboard and a stand-in writer (tests/support/fake_tensorboard.py).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from support import fake_tensorboard
from support.cifar_data import cifar_dir

from dawnbench_fast import cifar
from dawnbench_fast.cifar import cli as cifar_cli
from dawnbench_fast.execution import runtime
from dawnbench_fast.reporting import bench, run_log, run_report

TINY = ["--subset", "500", "--eval-subset", "200", "--epochs", "2", "--eval-every", "1",
        "--batch-size", "250", "--set", "widths=16,32,32", "--set", "whiten_images=500",
        "--latency-images", "10", "--no-progress", "--no-download", "--threads", "1"]
SUBMISSION = ["--author", "Ada Lovelace", "--email", "ada@example.org",
              "--code-url", "https://example.org/ada/cifar", "--hardware", "2 x Test CPU (lab box)"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Iterator[Path]:
    # One thread: on 2 cores shared with other work, two threads of a tiny net
    # wait on each other (seconds a step); the tests after this one get theirs back.
    threads = torch.get_num_threads()
    out = tmp_path_factory.mktemp("tiny") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "torch.utils.tensorboard", fake_tensorboard.module())
        console = io.StringIO()  # kept beside the folder: report.txt must equal it
        try:
            with contextlib.redirect_stdout(console):
                code = cifar.main([*TINY, *SUBMISSION, "--data-dir", str(cifar_dir()), "--out", str(out),
                                   "--tensorboard"])
        finally:
            runtime.set_threads(threads)
    (out.parent / "console.txt").write_text(console.getvalue())
    assert code == 0
    yield out


def submission_files(out: Path) -> tuple[dict, dict, str]:
    """(training JSON, inference JSON, file stem) of a run folder."""
    (tsv,) = out.glob("*.tsv")
    return (json.loads((out / f"{tsv.stem}.json").read_text()),
            json.loads((out / f"{tsv.stem}_inference.json").read_text()), tsv.stem)


def test_submission_fields_come_from_the_flags(tiny_run):
    train, inference, stem = submission_files(tiny_run)
    for entry in (train, inference):
        assert entry["author"] == "Ada Lovelace"
        assert entry["authorEmail"] == "ada@example.org"
        assert entry["codeURL"] == "https://example.org/ada/cifar"
        assert entry["hardware"] == "2 x Test CPU (lab box)"
    # the file names follow DAWNBench's [author]_[model]_[hardware]_[framework]
    assert stem == f"Ada-Lovelace_{cifar_cli.MODEL_NAME}_2-x-Test-CPU-lab-box_pytorch"
    assert train["logFilename"] == f"{stem}.tsv"
    # run.json keeps the hardware as detected: what reproduces the run
    run = json.loads((tiny_run / "run.json").read_text())
    assert run["hardware"] != "2 x Test CPU (lab box)"


def test_without_the_flags_the_fields_are_as_before():
    base = bench.train_json(author="dawnbench_fast", email="", model="m", hardware="h",
                            cost_per_hour=None, log_filename="x.tsv", misc={})
    assert base["codeURL"] == ""  # never a made-up URL (tests/runner/test_cli_surface.py)
    args = cifar.build_parser().parse_args([])
    assert (args.author, args.email, args.code_url, args.hardware) == ("dawnbench_fast", "", None, None)


def test_epoch_log_has_a_line_per_epoch(tiny_run):
    lines = (tiny_run / run_log.LOG_NAME).read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["epoch"] for r in records] == [1, 2]
    rows = json.loads((tiny_run / "run.json").read_text())["result"]["epochs"]
    for rec, row in zip(records, rows, strict=True):  # --eval-every 1: an evaluation each epoch
        assert rec["seed"] == 0
        assert rec["top1"] == row["top1"] and rec["tta"] == row["tta"]
        assert rec["clock_seconds"] == pytest.approx(row["clock_seconds"])
        assert rec["wall_seconds"] >= rec["clock_seconds"] * 0.99
        assert 0 < rec["train_loss"] < 10
        assert set(rec["lr"]) == {"filters", "whiten_bias", "norm_biases", "head"}
    # the schedule decays linearly: the second epoch's rates are below the first's (the
    # whitening bias's may already be 0: it freezes after 0.19 epochs in the default recipe)
    live = {k for k, v in records[0]["lr"].items() if v > 0}
    assert {"filters", "head"} <= live and all(records[1]["lr"][k] < records[0]["lr"][k] for k in live)
    assert records[0]["clock_seconds"] < records[1]["clock_seconds"]


def test_plot_and_html_report_are_written(tiny_run):
    png = (tiny_run / run_report.PLOT_NAME).read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    page = (tiny_run / run_report.HTML_NAME).read_text()
    assert base64.b64encode(png).decode() in page  # the plot inline: the page stands alone
    assert "<script" not in page and 'src="http' not in page
    run = json.loads((tiny_run / "run.json").read_text())
    # the per-epoch table: a row per epoch with its accuracy, clock and learning rates
    for rec, row in zip(run_log.read_log(tiny_run / run_log.LOG_NAME), run["result"]["epochs"], strict=True):
        assert f"<td>{rec['epoch']}</td><td>{rec['train_loss']:.4f}</td><td>{rec['lr']['filters']:.4g}</td>" \
            in page
        assert f"<td>{100 * row['top1']:.2f}</td>" in page
        assert f"<td>{row['clock_seconds']:.2f}</td>" in page
    assert "lr filters" in page and "top-1 %" in page
    assert "&quot;" not in page.split("<h2>Config</h2>")[1]  # the config is readable JSON
    assert '"whiten_images": 500' in page


def test_tensorboard_gets_the_log_lines(tiny_run):
    (writer,) = fake_tensorboard.WRITERS
    assert writer.log_dir == str(tiny_run / "tensorboard") and writer.closed
    for rec in run_log.read_log(tiny_run / run_log.LOG_NAME):
        assert ("test/top1", rec["top1"], rec["epoch"]) in writer.scalars
        assert ("train/loss", rec["train_loss"], rec["epoch"]) in writer.scalars
        assert ("lr/filters", rec["lr"]["filters"], rec["epoch"]) in writer.scalars


def test_config_from_run_json_is_the_same_config(tiny_run, capsys):
    recorded = json.loads((tiny_run / "run.json").read_text())["config"]
    capsys.readouterr()
    assert cifar.main(["--config", str(tiny_run / "run.json"), "--show-config"]) == 0
    assert json.loads(capsys.readouterr().out) == recorded
    assert recorded["widths"] == [16, 32, 32] and recorded["subset"] == 500  # not the defaults


def test_report_txt_is_the_console_summary(tiny_run):
    """report.txt holds the summary as printed: the run table with the time
    to target with the warm-up charged, the outcome, where the time goes."""
    text = (tiny_run / run_report.TEXT_NAME).read_text()
    console = (tiny_run.parent / "console.txt").read_text()
    assert text.startswith("DAWNBench CIFAR-10 report: ") and text.endswith("\n")
    assert console.endswith(f"\n{text}reports written to {tiny_run}/\n")  # the summary, verbatim
    assert "where the time goes" in text and "  train: forward" in text and "warmup" in text
    assert "TTA + warm-up s" in text
    run = json.loads((tiny_run / "run.json").read_text())["result"]
    assert run["train_split_seconds"] and f"{run['phases_seconds']['warmup']:.2f}" in text


def test_the_latency_loops_accuracy_is_reported_over_its_images(tiny_run):
    """--latency-images 10 of 200 test images: the loop's own predictions are
    scored and labelled as over those 10, in run.json, the inference JSON,
    report.txt and report.html."""
    result = json.loads((tiny_run / "run.json").read_text())["result"]
    assert result["latency_images"] == 10 and result["latency_test_images"] == 200
    assert result["latency_top1"] in {k / 10 for k in range(11)}  # scored over the 10 images timed
    assert result["latency_matches_batched"] is None  # not the whole test set: no comparison
    _, inference, _ = submission_files(tiny_run)
    assert inference["misc"]["latency_top1"] == result["latency_top1"]
    note = f"top-1 {100 * result['latency_top1']:.2f}% over its 10 images only (of 200 test images"
    assert note in inference["misc"]["latency_note"]
    assert note in (tiny_run / run_report.TEXT_NAME).read_text()
    assert note in (tiny_run / run_report.HTML_NAME).read_text()
