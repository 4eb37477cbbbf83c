"""The reliability behaviour of the ImageNet trainer (the CIFAR trainer's,
tests/training/test_resume.py, shared through runs.py): a run stopped mid-epoch and
resumed ends with the weights of an uninterrupted run, bit for bit; a used
--out folder is refused; an unreadable image is a one-line error naming the
file, or with ``skip_bad`` is left out and reported; and --data-dir takes
packed splits (train.pack, val.pack) as it takes the folders.

Runs are in-process on a generated 10-class set at 64 px (fp32, 2 threads),
the interruption a KeyboardInterrupt raised from inside a training step of
the third epoch (what ^C does; SIGKILL is tests/training/test_resume.py's).
"""

from __future__ import annotations

import shutil

import pytest
import torch

from dawnbench_fast import imagenet
from dawnbench_fast.data.imagenet.folder import ImageFolder
from dawnbench_fast.data.imagenet.pack import PackedSource, pack
from dawnbench_fast.data.imagenet.synthetic import make_image_folder
from dawnbench_fast.imagenet import task as imagenet_task
from dawnbench_fast.training.checkpoint import RUN_CHECKPOINT

# 240 training images, batch 48: 5 steps per epoch
TINY = ["--set", "arch=resnet18", "--set", "width=8", "--set", "min_res=64", "--set", "max_res=64",
        "--set", "val_res=64", "--set", "warmup_epochs=1", "--set", "lr_per_256=1.0",
        "--batch-size", "48", "--precision", "fp32", "--threads", "2", "--no-progress",
        "--latency-images", "0", "--epochs", "3"]
STEPS_PER_EPOCH = 5


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_image_folder(tmp_path_factory.mktemp("imagenet"), classes=10, train_per_class=24,
                             val_per_class=4, size=72)


def _main(folder, out, *extra: str) -> int:
    return imagenet.main(["--data-dir", str(folder), "--out", str(out), *TINY, *extra])


def _weights(path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


@pytest.mark.e2e
def test_interrupted_then_resumed_gives_the_same_weights_and_out_is_not_reused(folder, tmp_path, capsys,
                                                                                monkeypatch):
    assert _main(folder, tmp_path / "whole", "--save-model", str(tmp_path / "whole.pt")) == 0

    step = imagenet.ImageNetTask.train_step
    stop_at = 2 * STEPS_PER_EPOCH + 2  # inside epoch 3, after epoch 2's checkpoint

    def interrupting(self, x, y):
        if self.step == stop_at:
            raise KeyboardInterrupt
        return step(self, x, y)

    monkeypatch.setattr(imagenet.ImageNetTask, "train_step", interrupting)
    assert _main(folder, tmp_path / "cut") == 130
    assert "interrupted" in capsys.readouterr().err
    saved = torch.load(tmp_path / "cut" / RUN_CHECKPOINT, map_location="cpu", weights_only=True)
    assert saved["loop"]["epochs_done"] == 2 and not (tmp_path / "cut" / "run.json").exists()
    monkeypatch.setattr(imagenet.ImageNetTask, "train_step", step)

    assert imagenet.main(["--resume", str(tmp_path / "cut"), "--data-dir", str(folder), *TINY,
                          "--save-model", str(tmp_path / "resumed.pt")]) == 0
    assert "resumed from" in capsys.readouterr().out
    whole, resumed = _weights(tmp_path / "whole.pt"), _weights(tmp_path / "resumed.pt")
    assert whole.keys() == resumed.keys() and all(torch.equal(whole[k], resumed[k]) for k in whole)

    # the finished run's folder is not written over by a new run
    assert _main(folder, tmp_path / "whole") == 2
    err = capsys.readouterr().err
    assert "--out" in err and "folder is not empty" in err and err.count("\n") == 1


@pytest.mark.e2e
def test_an_unreadable_image_is_one_line_or_skipped_and_counted(folder, tmp_path, capsys):
    root = tmp_path / "data"
    shutil.copytree(folder, root)
    bad = sorted((root / "train").glob("*/*.JPEG"))[7]
    bad.write_bytes(bad.read_bytes()[:300])  # a truncated JPEG: its header parses, its data do not
    assert _main(root, tmp_path / "strict", "--epochs", "2") == 2
    err = capsys.readouterr().err
    assert bad.name in err and "not a readable image" in err and err.count("\n") == 1, err

    assert _main(root, tmp_path / "lenient", "--epochs", "2", "--set", "skip_bad=true") == 0
    err = capsys.readouterr().err
    assert "skip_bad: 1 unreadable images left out so far" in err and bad.name in err


def test_data_dir_takes_packed_splits(folder, tmp_path):
    packed = tmp_path / "packed"
    packed.mkdir()
    train = ImageFolder(folder / "train")
    pack(train, packed / "train.pack", threads=2)
    pack(ImageFolder(folder / "val", classes=list(train.classes)), packed / "val.pack", threads=2)
    data = imagenet_task.load_data(str(packed))
    assert isinstance(data.train, PackedSource) and isinstance(data.val, PackedSource)
    assert torch.equal(data.train.labels, train.labels) and data.classes == 10
    folders = imagenet_task.load_data(str(folder))
    assert isinstance(folders.train, ImageFolder) and len(folders.val) == len(data.val) == 40
