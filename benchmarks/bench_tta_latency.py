"""One-image latency of the 6-view TTA: each view its own forward (as before)
against all six views stacked into one forward (cifar.tta_logits), on the
recipe's BN-folded net, under pytest-benchmark (the figures are per image).

    python -m pytest benchmarks/bench_tta_latency.py [--benchmark-autosave]
    python benchmarks/bench_tta_latency.py [--images 300] [--rounds 5]   # the same

Each round classifies ``BENCH_IMAGES`` images (default 300) one at a time,
the result read back as a run's latency does; ``BENCH_ROUNDS`` rounds
(default 5) after one warm-up round, each procedure's back to back (the
script before alternated them within each round). Random weights and
images: the time does not depend on them. Precision: the recipe's default
(auto) as resolved on this CPU.
"""

from __future__ import annotations

import argparse
import sys

import pytest
import torch
import torch.nn.functional as F
from knobs import env_int

from dawnbench_fast import dispatch
from dawnbench_fast.cifar import Config
from dawnbench_fast.cifar.evaluation import inference_net
from dawnbench_fast.cifar.train_state import build_model
from dawnbench_fast.cifar.tta import tta_logits
from dawnbench_fast.config.precision import resolve_precision
from dawnbench_fast.execution.runtime import autocast

IMAGES = env_int("BENCH_IMAGES", 300)
ROUNDS = env_int("BENCH_ROUNDS", 5)


def per_view(model, x: torch.Tensor) -> torch.Tensor:
    """The previous procedure: one forward per view (same views and weights)."""
    def mirrored(v):
        return 0.5 * model(v) + 0.5 * model(v.flip(-1))

    padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
    h, w = x.shape[-2:]
    return 0.5 * mirrored(x) + 0.25 * (mirrored(padded[..., :h, :w]) + mirrored(padded[..., 2:, 2:]))


@pytest.mark.parametrize("procedure", ["per_view", "stacked"])
def test_tta_latency(benchmark, procedure):
    cfg, device = Config(), torch.device("cpu")
    precision = resolve_precision(cfg.precision, device).precision
    torch.manual_seed(0)
    model = build_model(cfg, device, dispatch.resolve_backend("auto", device))  # cpu where it runs
    model.init_whitening(torch.randn(500, 3, 32, 32), eps=cfg.whiten_eps)
    images = torch.randn(IMAGES, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    with torch.no_grad(), autocast(precision, device):
        net = inference_net(model, precision=precision)
        views = {"per_view": lambda x: per_view(net, x), "stacked": lambda x: tta_logits(net, x, 2)}
        predict, n = views[procedure], iter(range(10**9))

        def one_image():  # the next image each call, round after round
            i = next(n) % IMAGES
            predict(images[i : i + 1]).argmax(1).item()

        benchmark.group = f"one-image latency, 6-view TTA, {precision}"
        benchmark.pedantic(one_image, rounds=ROUNDS, iterations=IMAGES, warmup_rounds=1)
    benchmark.extra_info.update(ms_per_image=1e3 * benchmark.stats.stats.median,
                                threads=torch.get_num_threads(), precision=precision)


def main(argv: list[str] | None = None) -> int:
    import script_entry

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="other arguments go to pytest")
    ap.add_argument("--images", type=int, help="images per round (BENCH_IMAGES)")
    ap.add_argument("--rounds", type=int, help="timed rounds (BENCH_ROUNDS)")
    args, rest = ap.parse_known_args(argv)
    return script_entry.run(__file__, {"BENCH_IMAGES": args.images, "BENCH_ROUNDS": args.rounds},
                            pytest_args=rest)


if __name__ == "__main__":
    sys.exit(main())
