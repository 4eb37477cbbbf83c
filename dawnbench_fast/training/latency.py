"""DAWNBench's one-image latency, and the accuracy of the predictions that
loop makes.

The inference entry states an accuracy and a latency; the latency comes from
classifying test images one at a time, so that loop's own predictions are
scored too (rather than thrown away), and the entry can say whether they agree
with the batched final evaluation's accuracy (they should, over the whole test
set: the same model, the same views, only the batch size differs).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from dawnbench_fast.training.task import Predict, Task


@dataclass(frozen=True)
class Latency:
    """One latency measurement: mean milliseconds per image over ``images``
    test images, and the accuracy of the loop's predictions over them (top-5
    where the task measures it). ``test_images``: the whole test set's size."""

    ms: float
    images: int
    top1: float
    top5: float | None
    test_images: int

    @property
    def whole_test_set(self) -> bool:
        return self.images >= self.test_images


@torch.no_grad()
def one_image_predictions(predict: Predict, images: torch.Tensor, n: int, device: torch.device,
                          k: int = 1) -> tuple[float, torch.Tensor]:
    """Classify the first ``n`` of ``images`` one at a time; returns (mean
    milliseconds per image, the (n, k) top-k class indices). Every prediction
    is read back to the host, as a serving loop would (k=1: the argmax alone,
    the loop DAWNBench times)."""
    n = min(n, len(images))
    predict(images[:1]).argmax(1).item()  # first-call costs stay out
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    out: list[list[int]] = []
    t0 = time.perf_counter()
    for i in range(n):
        logits = predict(images[i : i + 1])
        out.append([logits.argmax(1).item()] if k == 1 else logits.topk(k, 1).indices[0].tolist())
    ms = (time.perf_counter() - t0) * 1000.0 / n
    return ms, torch.tensor(out, dtype=torch.int64).reshape(n, k)


def one_image_latency(predict: Predict, images: torch.Tensor, n: int,
                      device: torch.device) -> tuple[float, int]:
    """DAWNBench inference latency: (mean milliseconds per image, images timed)."""
    ms, preds = one_image_predictions(predict, images, n, device)
    return ms, len(preds)


def measure_latency(task: Task, tta: bool, n: int, top5: bool = False) -> Latency:
    """One-image latency of ``task``'s deployed model over ``n`` test images,
    with the accuracy of its predictions (``top5``: also top-5, over at most
    as many classes as the model has)."""
    with task.predictor(tta) as (predict, images, labels, test_images):
        k = min(5, predict(images[:1]).shape[1]) if top5 else 1
        ms, preds = one_image_predictions(predict, images, n, task.device, k)
    hits = preds.cpu() == labels[: len(preds)].cpu()[:, None]
    n = len(preds)  # fractions from counts, as the batched evaluation's (no float32 rounding)
    return Latency(ms, n, hits[:, 0].sum().item() / n, hits.any(1).sum().item() / n if top5 else None,
                   test_images)
