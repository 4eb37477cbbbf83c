"""The nvtx ranges that Nsight Systems shows (docs/USAGE.md, "Profiling with Nsight
Systems"): every phase of the clock, every training step, and the
evaluations down to their batches and test-time augmentation views. nvtx is a
no-op without a profiler, so the ranges are recorded here through a
stand-in for ``nvtx.annotate``."""

from __future__ import annotations

from contextlib import contextmanager

import nvtx
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast.cifar import Config
from dawnbench_fast.training import train
from dawnbench_fast.training.train import NVTX_DOMAIN, Phases


def test_training_and_evaluation_are_named_in_nsight(monkeypatch):
    opened: list[tuple[str, str]] = []

    @contextmanager
    def annotate(message: str, domain: str | None = None, **kw):
        opened.append((message, domain))
        yield

    monkeypatch.setattr(nvtx, "annotate", annotate)
    # untrained: every test image is unsure, so selective TTA gives it the other views
    cfg = Config(subset=64, batch_size=16, eval_subset=100, eval_batch_size=60, whiten_images=64,
                 widths=(8, 8, 8), epochs=1, tta_level=2, tta_below=0.6, device="cpu", kernels="torch",
                 precision="fp32", data_dir=str(cifar_dir()), download=False)
    task = cfg.build_task(torch.device("cpu"))
    train.train(task, Phases(task.device), progress=False)
    assert {domain for _, domain in opened} == {NVTX_DOMAIN}
    names = [name for name, _ in opened]
    assert [n for n in names if n in ("init", "train", "eval")] == ["init", "train", "eval"]
    assert names.count("train_step") == 4
    after_eval = names[names.index("eval"):]
    # the final evaluation: one pass over the 100 images (one range); inside it one range for the
    # one view of all of them (forwards of 60 and 40 images), then, every image unsure, a range for
    # each batch of their views, 60 / 6 = 10 images a batch
    assert after_eval.count("eval_batch") == 1
    assert after_eval.count("tta_one_view") == 1 and after_eval.count("tta_views") == 10
