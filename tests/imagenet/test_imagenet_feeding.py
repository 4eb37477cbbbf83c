"""Whether the ImageNet loader can feed the steps: its threads under torchrun
(LOCAL_WORLD_SIZE simulated: the cores are shared by the node's ranks), two
batches of prefetch, the pre-flight that times it after the warm-up on the
real sample, and a folder of fewer than 5 classes (top-5 as top-k)."""

from __future__ import annotations

import json
import os

import pytest
from support.imagenet_sample import sample_tree

from dawnbench_fast import imagenet
from dawnbench_fast.data.imagenet import loader as loader_module
from dawnbench_fast.data.imagenet.folder import ImageFolder
from dawnbench_fast.data.imagenet.loader import ImageNetLoader, default_threads
from dawnbench_fast.data.imagenet.synthetic import make_image_folder
from dawnbench_fast.execution.distributed import World
from dawnbench_fast.imagenet.preflight import Preflight, message
from dawnbench_fast.imagenet.task import Config, make_loader

TINY = ["--set", "arch=resnet18", "--set", "width=8", "--set", "min_res=64", "--set", "max_res=64",
        "--set", "val_res=64", "--set", "warmup_epochs=0", "--precision", "fp32", "--threads", "2",
        "--no-progress", "--latency-images", "0", "--epochs", "1", "--device", "cpu"]


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return sample_tree(tmp_path_factory.mktemp("sample"))


@pytest.mark.parametrize("local, cores, expected", [(None, 16, 16), ("8", 16, 2), ("4", 6, 1), ("32", 16, 1),
                                                    ("", 16, 16)])
def test_threads_are_the_cores_shared_by_the_node_s_ranks(monkeypatch, sample, local, cores, expected):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    if local is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    assert default_threads() == expected
    # what the trainer builds by default (loader_threads 0), for a rank of 8 on the node
    with make_loader(ImageFolder(sample / "train"), Config(), World(), 4) as loader:
        assert loader.threads == expected and loader._pool._max_workers == expected
    with make_loader(ImageFolder(sample / "train"), Config(loader_threads=3), World(), 4) as loader:
        assert loader.threads == 3  # asked for: as asked


def test_two_batches_are_built_ahead(monkeypatch, sample):
    submitted = []
    real = ImageNetLoader._submit

    def counting(self, indices, uniforms, size):
        submitted.append(len(indices))
        return real(self, indices, uniforms, size)
    monkeypatch.setattr(ImageNetLoader, "_submit", counting)
    with ImageNetLoader(ImageFolder(sample / "train"), global_batch=10, seed=0, threads=2) as loader:
        assert loader.prefetch == loader_module.PREFETCH == 2
        batches = loader.train_batches(0, 32)
        next(batches)
        assert len(submitted) == 3  # the one handed out and two more
        batches.close()
    with pytest.raises(ValueError, match="prefetch 0"):
        ImageNetLoader(ImageFolder(sample / "train"), global_batch=10, seed=0, prefetch=0)


def test_the_loader_is_timed_for_about_the_seconds_asked(sample):
    with ImageNetLoader(ImageFolder(sample / "train"), global_batch=20, seed=0, threads=2) as loader:
        images, took = loader.time_images(64, 0.5)
        assert images >= 8 and 0.4 < took < 5  # whole chunks, the last ones finished after 0.5 s
        images, took = loader.time_images(64, 60, max_images=16)
        assert 16 <= images <= 16 + 2 * 2 * 8 and took < 30  # stopped by the image count


def test_the_verdict_says_what_to_do():
    fast = Preflight(loader_images_per_s=3000, needed_images_per_s=1000, step_seconds=0.128,
                     batch_per_rank=128, side=160, threads=12, decoder="pil", packed=True, seconds=3)
    assert "it keeps up (3.0x)" in message(fast, True) and fast.record()["keeps_up"] is True
    slow = Preflight(loader_images_per_s=250, needed_images_per_s=1000, step_seconds=0.128,
                     batch_per_rank=128, side=160, threads=1, decoder="pil", packed=False, seconds=3)
    text = message(slow, False)
    assert "cannot keep up" in text and "about 25% of the device's pace" in text
    assert "pack the data once" in text and "--decoder simplejpeg (pip install" in text
    assert "--no-preflight" in text and "\n" not in text


def test_preflight_on_the_sample_after_the_warm_up(sample, tmp_path, capsys):
    out = tmp_path / "run"
    code = imagenet.main(["--data-dir", str(sample), "--out", str(out), "--batch-size", "20",
                          "--set", "preflight_seconds=1", *TINY])
    err = capsys.readouterr().err
    assert code == 0, err
    (line,) = [x for x in err.splitlines() if x.startswith("pre-flight:")]
    assert "images/s at 64 px" in line and ("keeps up" in line or "cannot keep up" in line), line
    run = json.loads((out / "run.json").read_text())
    pre = run["result"]["loader_preflight"]
    assert pre["loader_images_per_s"] > 0 and pre["batch_per_rank"] == 20 and pre["side"] == 64
    assert pre["needed_images_per_s"] == pytest.approx(20 / pre["step_seconds"])
    assert run["config"]["decoder"] == "pil" and run["data"]["decoder"] == "pil"

    # skippable
    code = imagenet.main(["--data-dir", str(sample), "--out", str(tmp_path / "quiet"), "--batch-size", "20",
                          "--no-preflight", *TINY])
    assert code == 0 and "pre-flight" not in capsys.readouterr().err
    assert json.loads((tmp_path / "quiet" / "run.json").read_text())["result"]["loader_preflight"] is None


def test_fewer_than_five_classes_count_top_k_and_say_so(tmp_path, capsys):
    folder = make_image_folder(tmp_path / "three", classes=3, train_per_class=8, val_per_class=3, size=40)
    out = tmp_path / "run"
    code = imagenet.main(["--data-dir", str(folder), "--out", str(out), "--batch-size", "8",
                          "--no-preflight", *TINY])
    err = capsys.readouterr().err
    assert code == 0, err
    assert err.count("note: 3 classes in --data-dir: top-5 counts the top 3") == 1, err
    run = json.loads((out / "run.json").read_text())
    assert run["result"]["final_top5"] == 1.0 and run["data"]["top5_k"] == 3
