"""One-image latency of the 6-view TTA: each view its own forward (as before)
against all six views stacked into one forward (cifar.tta_logits), on the
recipe's BN-folded net, interleaved, same process.

    python benchmarks/bench_tta_latency.py [--images 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from dawnbench_fast.cifar import Config, build_model, inference_net
from dawnbench_fast.runtime import autocast
from dawnbench_fast.tta import tta_logits


def per_view(model, x: torch.Tensor) -> torch.Tensor:
    """The previous procedure: one forward per view (same views and weights)."""
    def mirrored(v):
        return 0.5 * model(v) + 0.5 * model(v.flip(-1))

    padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
    h, w = x.shape[-2:]
    return 0.5 * mirrored(x) + 0.25 * (mirrored(padded[..., :h, :w]) + mirrored(padded[..., 2:, 2:]))


def ms_per_image(predict, images: torch.Tensor) -> float:
    predict(images[:1]).argmax(1).item()
    t0 = time.perf_counter()
    for i in range(len(images)):
        predict(images[i : i + 1]).argmax(1).item()
    return (time.perf_counter() - t0) * 1000 / len(images)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    cfg = Config()
    device = torch.device("cpu")
    torch.manual_seed(0)
    model = build_model(cfg, device, "cpu")
    model.init_whitening(torch.randn(500, 3, 32, 32), eps=cfg.whiten_eps)
    images = torch.randn(a.images, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    with torch.no_grad(), autocast(cfg.precision, device):
        net = inference_net(model)
        times: dict[str, list[float]] = {"per view": [], "stacked": []}
        for _ in range(a.rounds):
            times["per view"].append(ms_per_image(lambda x: per_view(net, x), images))
            times["stacked"].append(ms_per_image(lambda x: tta_logits(net, x, 2), images))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:9}: median {med[k]:.3f} ms/image over {a.rounds} rounds ({min(v):.3f}-{max(v):.3f})")
    print(f"speed-up: {med['per view'] / med['stacked']:.2f}x  (threads {torch.get_num_threads()})")


if __name__ == "__main__":
    main()
