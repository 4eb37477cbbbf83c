"""The per-epoch JSON-lines log (dawnbench_fast.reporting.run_log): appended and
flushed line by line, so a killed run keeps its finished epochs; a resumed
run cuts it back to its checkpoint's epochs; a new run starts it afresh."""

from __future__ import annotations

import json

import torch

from dawnbench_fast.reporting import run_log
from dawnbench_fast.training.train import EpochRow, LoopResult


def record(epoch: int) -> dict:
    return {"seed": 0, "epoch": epoch, "train_loss": 1.0 / epoch, "lr": {"a": 0.1}, "top1": None,
            "top5": None, "tta": None, "clock_seconds": float(epoch), "wall_seconds": float(epoch)}


def test_each_line_is_on_disk_when_append_returns(tmp_path):
    path = tmp_path / "run" / run_log.LOG_NAME
    log = run_log.EpochLog(path)
    assert not path.parent.exists()  # nothing before the first epoch ends
    log.append(record(1))
    assert json.loads(path.read_text()) == record(1)  # readable by another process now
    log.append(record(2))
    assert [json.loads(x)["epoch"] for x in path.read_text().splitlines()] == [1, 2]


def test_a_line_cut_by_a_kill_is_skipped_and_resume_cuts_back(tmp_path):
    path = tmp_path / run_log.LOG_NAME
    log = run_log.EpochLog(path)
    for epoch in (1, 2, 3):
        log.append(record(epoch))
    with path.open("a") as f:
        f.write('{"seed": 0, "epoch": 4, "train_lo')  # killed mid-write
    assert [r["epoch"] for r in run_log.read_log(path)] == [1, 2, 3]
    # the checkpoint holds 2 epochs (killed before epoch 3's checkpoint): epoch 3 runs again
    resumed = run_log.EpochLog(path, resume_epochs=2)
    resumed.append(record(3))
    assert [r["epoch"] for r in run_log.read_log(path)] == [1, 2, 3]
    assert path.read_text().endswith("\n")


def test_a_new_run_replaces_an_old_log(tmp_path):
    path = tmp_path / run_log.LOG_NAME
    path.write_text(json.dumps(record(7)) + "\n")  # an --overwrite'd folder's log
    log = run_log.EpochLog(path)
    assert run_log.read_log(path) == [record(7)]  # untouched until the first epoch ends
    log.append(record(1))
    assert run_log.read_log(path) == [record(1)]


def test_record_of_an_epoch_with_and_without_an_evaluation():
    res = LoopResult(rows=[EpochRow(2, 5.0, 0.5, 0.75, None, True)], epochs_done=2,
                     train_losses=[2.0, float("nan")])
    rec = run_log.epoch_record(3, res, {"head": 0.5}, 5.0, 6.0)
    assert (rec["epoch"], rec["top1"], rec["tta"], rec["train_loss"]) == (2, 0.75, True, None)
    res.epochs_done, res.train_losses = 3, [2.0, 1.5, 1.25]
    rec = run_log.epoch_record(3, res, {"head": 0.5}, 7.0, 8.0)
    assert (rec["epoch"], rec["top1"], rec["train_loss"], rec["clock_seconds"]) == (3, None, 1.25, 7.0)


def test_learning_rates_of_a_task_without_names():
    class Task:
        optimizers = [torch.optim.SGD([{"params": [torch.zeros(1, requires_grad=True)], "lr": 0.1},
                                       {"params": [torch.zeros(1, requires_grad=True)], "lr": 0.2}])]

    assert run_log.learning_rates(Task()) == {"sgd0.0": 0.1, "sgd0.1": 0.2}


def test_old_checkpoints_without_losses_still_load():
    d = LoopResult(epochs_done=2).to_dict()
    del d["train_losses"]
    assert LoopResult.from_dict(d).train_losses == [None, None]
