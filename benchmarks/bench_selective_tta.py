"""Selective TTA on a trained model: accuracy, share of images given the TTA
views, and one-image latency, for each threshold ``tta_below``, all on the
same weights (a paired comparison: the accuracy differences are the
procedure's, not a seed's).

    python -m dawnbench_fast.cifar --save-model runs/m.pt ...   # any trained model
    python benchmarks/bench_selective_tta.py runs/m.pt [--below 0.5,0.6,0.7,1] [--images 1000]

Accuracy and share are computed over all 10,000 test images from their
one-view and 6-view logits (as tta.selective_tta_logits combines them);
latency is timed one image at a time over the first ``--images`` images.
A study of a trained model, not a timing of kernels or steps: it stays a
script beside the pytest-benchmark files (docs/PERFORMANCE.md, "How to run,
save and compare the benchmarks").
"""

from __future__ import annotations

import argparse

import torch

from dawnbench_fast.cifar import Config, load_model
from dawnbench_fast.cifar.evaluation import inference_net
from dawnbench_fast.cifar.tta import selective_tta_logits, tta_logits
from dawnbench_fast.data.cifar10 import load_cifar10
from dawnbench_fast.data.cifar10_device import prepare_data
from dawnbench_fast.execution.runtime import autocast
from dawnbench_fast.training.latency import one_image_latency
from dawnbench_fast.training.train import batched


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="weights written by --save-model")
    ap.add_argument("--below", default="0.4,0.5,0.6,0.7,0.8,1.0", help="thresholds, comma-separated")
    ap.add_argument("--images", type=int, default=1000, help="images timed one at a time per threshold")
    args = ap.parse_args()
    device = torch.device("cpu")
    cfg = Config()
    data = prepare_data(load_cifar10(None, allow_download=False), cfg, device)
    model = load_model(args.model, device).to(memory_format=torch.channels_last)
    with torch.no_grad(), autocast(cfg.precision, device):
        net = inference_net(model, precision=cfg.precision)
        one, full, labels = [], [], []
        for x, y in batched(data.test_x, data.test_labels, 500):
            first = net(x)
            one.append(first.float())
            full.append(tta_logits(net, x, 2, first=first).float())
            labels.append(y)
        one, full, labels = torch.cat(one), torch.cat(full), torch.cat(labels)
        conf = one.softmax(1).amax(1)
        print(f"one view {100 * (one.argmax(1) == labels).float().mean():.2f}%, "
              f"6-view TTA {100 * (full.argmax(1) == labels).float().mean():.2f}%")
        print("tta_below  share_tta  top-1    ms/image")
        for below in (float(b) for b in args.below.split(",")):
            pick = conf < below
            pred = torch.where(pick[:, None], full, one).argmax(1)
            acc = 100 * (pred == labels).float().mean()
            ms, _ = one_image_latency(lambda x, b=below: selective_tta_logits(net, x, 2, b),
                                      data.test_x, args.images, device)
            print(f"{below:9.2f}  {100 * pick.float().mean():8.1f}%  {acc:.2f}%  {ms:8.3f}")


if __name__ == "__main__":
    main()
