"""Faults a user meets, through the ImageNet trainer's command line (the
runner is shared with CIFAR's): a full disk under the results folder, an
--out that cannot be created, and SIGTERM from a scheduler. Each ends in one
line that names the folder or says how to go on, with the last checkpoint
whole and no partial file left.

Runs are tiny (a generated 10-class set at 32 px, a ResNet-18 of width 8, 5
steps an epoch). The full disk is an OSError(ENOSPC) raised by the file that
torch.save writes the second checkpoint into (torch turns it into a
RuntimeError about stream positions: what users saw), and a real one on a
small tmpfs where the test may mount one.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dawnbench_fast import atomic, imagenet
from dawnbench_fast.data.imagenet.synthetic import make_image_folder
from dawnbench_fast.imagenet import cli as imagenet_cli
from dawnbench_fast.reporting.run_log import EpochLog
from dawnbench_fast.runner import stopping
from dawnbench_fast.training import checkpoint
from dawnbench_fast.training.checkpoint import RUN_CHECKPOINT

TINY = ["--set", "arch=resnet18", "--set", "width=8", "--set", "min_res=32", "--set", "max_res=32",
        "--set", "val_res=32", "--set", "warmup_epochs=0", "--batch-size", "16", "--precision", "fp32",
        "--threads", "2", "--no-progress", "--latency-images", "0", "--no-preflight", "--device", "cpu"]
PROG = imagenet_cli.PROG


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_image_folder(tmp_path_factory.mktemp("imagenet"), classes=10, train_per_class=8,
                             val_per_class=2, size=36)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _temp_files(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob(".*")]


def test_a_full_disk_at_a_checkpoint_is_one_line_and_keeps_the_last_one(folder, tmp_path, capsys,
                                                                       monkeypatch):
    writes = {"checkpoints": 0}
    real_write = atomic._KeepError.write
    real_save_run = checkpoint.save_run

    def second_fails(path, **state):
        writes["checkpoints"] += 1
        return real_save_run(path, **state)

    def full_disk(self, data):
        if writes["checkpoints"] == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(self, data)
    monkeypatch.setattr(checkpoint, "save_run", second_fails)
    monkeypatch.setattr(atomic._KeepError, "write", full_disk)
    out = tmp_path / "run"
    code = imagenet.main(["--data-dir", str(folder), "--out", str(out), "--epochs", "3", *TINY])
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and line.startswith(f"{PROG}: error: cannot write {RUN_CHECKPOINT} in {out}/")
    assert "No space left on device" in line and f"--resume {out}" in line, line
    saved = torch.load(out / RUN_CHECKPOINT, map_location="cpu", weights_only=True)
    assert saved["loop"]["epochs_done"] == 1  # the last good one, whole
    assert _temp_files(out) == [] and not (out / "run.json").exists()


def _mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode})")


def test_a_real_full_disk_keeps_the_last_checkpoint_and_leaves_no_partial_file(tmp_path):
    disk = tmp_path / "small"
    _mount_tmpfs(disk, "512k")
    try:
        path = disk / "run" / RUN_CHECKPOINT
        state = dict(config={"seed": 0}, loop={"epochs_done": 1}, phases={}, wall_start=0.0, resumes=0)
        checkpoint.save_run(path, task_state={"w": torch.zeros(1000)}, **state)
        with pytest.raises(atomic.WriteFailed) as failed:
            checkpoint.save_run(path, task_state={"w": torch.zeros(1_000_000)}, **state)  # 4 MB
        full = f"cannot write {RUN_CHECKPOINT} in {path.parent}/: No space left on device"
        assert str(failed.value) == full
        assert torch.load(path, weights_only=True)["task"]["w"].shape == (1000,)
        assert sorted(p.name for p in path.parent.iterdir()) == [RUN_CHECKPOINT]
        # the epoch log's append, written before each checkpoint, says the same
        log = EpochLog(disk / "run" / "epochs.jsonl")
        with pytest.raises(atomic.WriteFailed, match="cannot write epochs.jsonl in .*: No space left"):
            for _ in range(20_000):  # ~1 MB of lines: more than the disk holds
                log.append({"epoch": 1, "pad": "x" * 50})
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.parametrize("where", ["proc", "under_a_file"])
def test_an_out_that_cannot_be_created_is_one_line_before_any_work(folder, tmp_path, capsys, monkeypatch,
                                                                     where):
    if where == "proc":
        if not Path("/proc/self").is_dir():
            pytest.skip("no /proc here")
        out = Path("/proc/dawnbench_fast_out/run")  # /proc refuses new entries, even to root
    else:
        (tmp_path / "a_file").write_text("not a folder")
        out = tmp_path / "a_file" / "run"
    monkeypatch.setattr(imagenet_cli, "load_data", lambda *a: pytest.fail("the data was read"))
    code = imagenet.main(["--data-dir", str(folder), "--out", str(out), *TINY])
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and line.startswith(f"{PROG}: error: --out {out}: "), line
    assert ("/proc refuses new files" if where == "proc" else "a_file is a file") in line
    # --save-model is checked the same way
    code = imagenet.main(["--data-dir", str(folder), "--out", str(tmp_path / "ok"), "--save-model",
                          str(out / "m.pt"), *TINY])
    assert code == 2 and "--save-model" in _one_line(capsys.readouterr().err)


def test_sigterm_keeps_the_checkpoint_says_how_to_resume_and_exits_143(folder, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "dawnbench_fast.imagenet", "--data-dir", str(folder), "--out", str(out),
           "--epochs", "400", *TINY]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    try:
        while not (out / RUN_CHECKPOINT).exists():
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            assert time.monotonic() < deadline, "no checkpoint after 120 s"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == stopping.TERMINATED_STATUS == 143, err[-2000:]
    assert "Traceback" not in err and f"{PROG}: terminated (SIGTERM)" in err, err
    (hint,) = [x for x in err.splitlines() if x.startswith("terminated (SIGTERM): ")]
    assert f"{out / RUN_CHECKPOINT} holds the last finished epoch; go on with: python -m " \
           f"dawnbench_fast.imagenet --data-dir {folder} --out {out}" in hint
    assert hint.endswith(f"--resume {out}")
    saved = torch.load(out / RUN_CHECKPOINT, map_location="cpu", weights_only=True)
    assert 1 <= saved["loop"]["epochs_done"] < 400 and _temp_files(out) == []
    lines = (out / "epochs.jsonl").read_text().splitlines()
    assert json.loads(lines[saved["loop"]["epochs_done"] - 1])["epoch"] == saved["loop"]["epochs_done"]


def test_the_resume_command_drops_an_earlier_resume():
    argv = ["/x/dawnbench_fast/imagenet/__main__.py", "--resume", "r", "--epochs", "3", "--resume=r"]
    assert stopping.resume_command("dawnbench_fast.imagenet", Path("r"), argv) == \
        "python -m dawnbench_fast.imagenet --epochs 3 --resume r"
    assert stopping.resume_command("m", Path("my run"), ["pytest"]) == \
        "the same command plus --resume 'my run'"
