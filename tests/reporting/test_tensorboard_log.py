"""--tensorboard: off by default, a one-line error (exit 2, before any data
is read, nothing written) where the tensorboard package is missing, and the
epoch records as scalars where it is there (a stand-in writer here: the
package is no dependency)."""

from __future__ import annotations

import sys

from support import fake_tensorboard
from support.cifar_data import cifar_dir

from dawnbench_fast import cifar
from dawnbench_fast.cifar import cli as cifar_cli
from dawnbench_fast.reporting import run_log
from dawnbench_fast.reporting.tensorboard_log import TENSORBOARD_DIR, TensorBoardLog

BASE = ["--no-download", "--no-progress", "--epochs", "1", "--subset", "1000", "--set", "whiten_images=1000",
        "--eval-subset", "200",
        "--batch-size", "500", "--latency-images", "0"]


def tripwire(*args, **kwargs):
    raise AssertionError("the data was read before the error")


def test_asked_for_without_the_package_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import raises ImportError
    monkeypatch.setattr(cifar_cli, "load_cifar10", tripwire)
    out = tmp_path / "out"
    code = cifar.main([*BASE, "--data-dir", str(cifar_dir()), "--out", str(out), "--tensorboard"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"{cifar.PROG}: error: --tensorboard:")
    assert "pip install tensorboard" in err[0]
    assert not out.exists()


def test_off_by_default(tmp_path):
    assert cifar.build_parser().parse_args([]).tensorboard is False
    assert [type(s) for s in run_log.sinks(tmp_path, None)] == [run_log.EpochLog]


def record(epoch: int, top1: float | None) -> dict:
    return {"seed": 0, "epoch": epoch, "train_loss": 2.0 / epoch, "lr": {"head": 0.5, "filters": 0.2},
            "top1": top1, "top5": None, "tta": None if top1 is None else False,
            "clock_seconds": 3.0 * epoch, "wall_seconds": 4.0 * epoch}


def test_records_become_scalars_step_epoch(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake_tensorboard.module())
    folder = tmp_path / "run" / TENSORBOARD_DIR
    log = TensorBoardLog(folder)
    assert not folder.exists()  # made with the first record, not before
    log.append(record(1, None))
    log.append(record(2, 0.5))
    log.close()
    (writer,) = fake_tensorboard.WRITERS
    assert writer.log_dir == str(folder) and writer.purge_step is None and writer.closed
    assert writer.flushes == 2  # each epoch's scalars are flushed: a killed run keeps them
    assert ("train/loss", 2.0, 1) in writer.scalars and ("train/loss", 1.0, 2) in writer.scalars
    assert ("lr/head", 0.5, 1) in writer.scalars and ("time/clock_seconds", 6.0, 2) in writer.scalars
    # an epoch without an evaluation has no accuracy point (not a zero)
    assert [s for s in writer.scalars if s[0] == "test/top1"] == [("test/top1", 0.5, 2)]
    assert not [s for s in writer.scalars if s[0] == "test/top5"]


def test_a_resumed_run_drops_the_events_after_its_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake_tensorboard.module())
    (log,) = [s for s in run_log.sinks(tmp_path, 3, tensorboard=True) if isinstance(s, TensorBoardLog)]
    log.append(record(4, None))
    assert fake_tensorboard.WRITERS[0].purge_step == 4
