"""A stand-in for the published airbench94_muon.py in the GPU suite's dry run
(``python -m tools.gpu_suite --dry-run``): the same inputs and the same console
table, none of its work. No compile, no CUDA, seconds on a CPU.

It reads ``cifar10/train.pt`` and ``cifar10/test.pt`` under the working
directory, as the published script does (so the suite's preparation of them
is exercised), runs a warm-up and then ``$AIRBENCH_RUNS`` "runs" of a
nearest-class-mean classifier on raw pixels (about 28% on CIFAR-10: a real
accuracy, not a constant), and prints rows that the suite's parser reads. Its
figures measure nothing.
"""

from __future__ import annotations

import os
import time

import torch

COLUMNS = ["run   ", "epoch", "train_acc", "val_acc", "tta_val_acc", "time_seconds"]


def row(values: dict) -> str:
    cells = []
    for col in COLUMNS:
        v = values.get(col.strip())
        text = "" if v is None else (f"{v:0.4f}" if isinstance(v, float) else str(v))
        cells.append(text.rjust(len(col)))
    return "".join(f"|  {c}  " for c in cells) + "|"


def load(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    data = torch.load(os.path.join("cifar10", f"{name}.pt"))
    images, labels = data["images"], data["labels"]
    assert images.dtype == torch.uint8 and images.shape[1:] == (32, 32, 3), images.shape
    assert labels.dtype == torch.int64 and len(labels) == len(images)
    return images.flatten(1).float() / 255, labels


def one_run(run: str, train: tuple, test: tuple) -> float:
    t0 = time.perf_counter()
    (x, y), (tx, ty) = train, test
    means = torch.stack([x[y == c].mean(0) if (y == c).any() else x.mean(0) for c in range(10)])
    train_acc = float((torch.cdist(x, means).argmin(1) == y).float().mean())
    val_acc = float((torch.cdist(tx, means).argmin(1) == ty).float().mean())
    print(row({"run": run, "epoch": 1, "train_acc": train_acc, "val_acc": val_acc}))
    seconds = time.perf_counter() - t0
    print(row({"epoch": "eval", "tta_val_acc": val_acc, "time_seconds": seconds}))
    return val_acc


def main() -> None:
    train, test = load("train"), load("test")
    line = "".join(f"|  {c}  " for c in COLUMNS) + "|"
    print("-" * len(line))
    print(line)
    print("-" * len(line))
    one_run("warmup", train, test)
    runs = int(os.environ.get("AIRBENCH_RUNS", "1"))
    accs = torch.tensor([one_run(str(r), train, test) for r in range(runs)])
    print(f"Mean: {accs.mean():.4f}    Std: {accs.std() if len(accs) > 1 else 0.0:.4f}")


if __name__ == "__main__":
    main()
