"""One-image latency of two forms of the evaluation's net, A against B,
image by image, on one trained model: the deployed loop as a run times it
(selective TTA as the model's own runs evaluated it: the level, threshold
and cascade saved with it; one image a call, the argmax read back), over
the test set.

    python -m dawnbench_fast.cifar --seed 1 --no-progress --out RUN --save-model m.pt
    python benchmarks/latency_ab.py --model m.pt --arms unfused,built --images 10000 --rounds 3 --out ab.json

The arms (each a fresh net as the evaluation builds it, then changed):

- ``built``: as the evaluation runs it;
- ``conv2d``: every folded conv on ``F.conv2d`` and ATen's activation (no
  reordered weight, nothing fused: models/inference_conv.py);
- ``unfused``: the weights reordered, but every activation run by ATen after
  its conv, and the whitening conv on ``F.conv2d`` (its fp32 input was
  not cast for the reordered weight): the evaluation before the activations
  were fused.

The two nets take turns image by image (A B for one image, B A for the
next), so that the drift of the machine and of the process's heap, which
moves a loop's time by 10-20% within minutes on a 2-core machine, falls on
both alike; two untimed passes over the first 2,000 images first. In a
process set up as a trainer's (threads, glibc's malloc keeping freed
memory). Without ``--model`` the net has random weights (the time does not
depend on them; the hit counts then mean nothing). A timing of a trained
model's two forms, interleaved, which pytest-benchmark's rounds cannot do: a
script (docs/PERFORMANCE.md, "How to run, save and compare").
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from dawnbench_fast import atomic
from dawnbench_fast.cifar import Config
from dawnbench_fast.cifar import evaluation as cifar_eval
from dawnbench_fast.cifar.evaluation import inference_net
from dawnbench_fast.cifar.recipe import RECIPES, evaluated_as
from dawnbench_fast.cifar.task import load_model_and_config
from dawnbench_fast.cifar.train_state import build_model
from dawnbench_fast.cifar.tta import selective_tta_logits
from dawnbench_fast.config.overrides import OneLineParser
from dawnbench_fast.config.precision import with_resolved_precision
from dawnbench_fast.data.cifar10 import DataError, load_cifar10
from dawnbench_fast.data.cifar10_device import DeviceData, prepare_data
from dawnbench_fast.execution.runtime import autocast, configure_process, malloc_mode
from dawnbench_fast.models.cifar_net import FoldedCifarNet
from dawnbench_fast.models.inference_conv import InferenceConv2d
from dawnbench_fast.reporting.bench import git_revision
from dawnbench_fast.vocabulary import activation


class _AtenActivation(nn.Module):
    """A conv whose activation ATen runs after it, not oneDNN inside it."""

    def __init__(self, conv: InferenceConv2d):
        super().__init__()
        self.conv, self.act = conv, conv.post_act
        conv.post_act = "identity"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return activation(self.act).fn(self.conv(x))


def _conv2d(net: FoldedCifarNet) -> None:
    for conv in (net.whiten, *net.convs):
        conv.reorder = False


def _unfused(net: FoldedCifarNet) -> None:
    net.whiten.reorder = False
    net.whiten = _AtenActivation(net.whiten)
    for i, conv in enumerate(net.convs):
        if conv.post_act != "identity":
            net.convs[i] = _AtenActivation(conv)


def _net_arm(change: Callable[[FoldedCifarNet], None]) -> Callable[[FoldedCifarNet, Config], Config]:
    """An arm that changes the net (in place) and evaluates it as the model's runs did."""
    return lambda net, cfg: change(net) or cfg


# The CPU recipe's cascade: the shifted views only for images the mirror leaves unsure
CASCADE = RECIPES["dawnbench_fast_cpu"]["tta_shift_below"]

# Each arm: (the fresh folded net, changed in place; the config the evaluation reads) -> that config.
ARMS: dict[str, Callable[[FoldedCifarNet, Config], Config]] = {
    "built": _net_arm(lambda net: None), "conv2d": _net_arm(_conv2d), "unfused": _net_arm(_unfused),
    # the same net, its unsure images given all five views in one step, or the cascade
    "one-step": lambda net, cfg: replace(cfg, tta_shift_below=1.0),
    "cascade": lambda net, cfg: replace(cfg, tta_shift_below=CASCADE),
}


def _arms(model: nn.Module, cfg: Config, arms: list[str]) -> tuple[dict, dict]:
    """Each arm's net (a fresh one as the evaluation builds it, then changed) and config."""
    nets, cfgs = {}, {}
    for arm in arms:
        nets[arm] = inference_net(model, precision=cfg.precision)
        cfgs[arm] = ARMS[arm](nets[arm], cfg)
    return nets, cfgs


def measure_batched(model: nn.Module, data: DeviceData, cfg: Config, arms: list[str], rounds: int) -> dict:
    """Each arm's clocked evaluation (cifar.evaluation.evaluate over the test
    set, as a run's final evaluation runs it): seconds by round, top-1 and
    the net's forwards per image (the views it took, one per row), the
    arms' order alternating round by round (A B, then B A), after each arm's
    warm-up and one untimed evaluation."""
    dev = torch.device("cpu")
    nets, cfgs = _arms(model, cfg, arms)
    for a in arms:  # its shapes, then one untimed evaluation (the first call's allocations stay out)
        cifar_eval.warm_up(nets[a], data, cfgs[a], dev, cfgs[a].tta_level)
        cifar_eval.evaluate(nets[a], data, cfgs[a], dev, cfgs[a].tta_level)
    seconds: dict[str, list[float]] = {a: [] for a in arms}
    top1: dict[str, float] = {}
    rows = dict.fromkeys(arms, 0)  # images through each arm's net in the timed rounds, views counted
    for a in arms:
        nets[a].register_forward_pre_hook(lambda _m, inp, a=a: rows.__setitem__(a, rows[a] + len(inp[0])))
    for r in range(rounds):
        for a in arms if r % 2 == 0 else arms[::-1]:
            t = time.perf_counter()
            top1[a] = cifar_eval.evaluate(nets[a], data, cfgs[a], dev, cfgs[a].tta_level)
            seconds[a].append(time.perf_counter() - t)
        print("round:", {a: round(v[-1], 3) for a, v in seconds.items()}, flush=True)
    a, b = arms
    n = len(data.test_x)
    out: dict = {k: {"rounds_s": v, "mean_s": sum(v) / len(v), "top1": top1[k], "images": n,
                     "views_per_image": rows[k] / (rounds * n), "tta_shift_below": cfgs[k].tta_shift_below}
                 for k, v in seconds.items()}
    out["ratio_b_over_a"] = out[b]["mean_s"] / out[a]["mean_s"]
    out["by_round"] = [q / p for p, q in zip(out[a]["rounds_s"], out[b]["rounds_s"], strict=True)]
    return out


def measure(model: nn.Module, cfg: Config, x: torch.Tensor, y: list[int], arms: list[str],
            rounds: int) -> dict:
    """Each arm's ms per image by round and its top-1 hits (the last round's), the arms
    interleaved image by image; ``rounds`` at least 1."""
    dev = torch.device("cpu")
    nets, cfgs = _arms(model, cfg, arms)

    def predict(arm: str, i: int) -> tuple[float, int]:
        c = cfgs[arm]
        t = time.perf_counter()
        p = selective_tta_logits(nets[arm], x[i:i + 1], c.tta_level, c.tta_below,
                                 shift_below=c.tta_shift_below).argmax(1).item()
        return time.perf_counter() - t, p

    n = len(y)
    rounds_ms: dict[str, list[float]] = {a: [] for a in arms}
    with torch.no_grad(), autocast(cfg.precision, dev):
        for _ in range(2):
            for i in range(min(n, 2000)):
                for a in arms:
                    predict(a, i)
        for _ in range(rounds):
            spent = dict.fromkeys(arms, 0.0)
            hits = dict.fromkeys(arms, 0)
            for i in range(n):
                for a in arms if i % 2 == 0 else arms[::-1]:
                    s, p = predict(a, i)
                    spent[a] += s
                    hits[a] += p == y[i]
            for a in arms:
                rounds_ms[a].append(1e3 * spent[a] / n)
            print("round:", {a: round(v[-1], 3) for a, v in rounds_ms.items()}, flush=True)
    a, b = arms
    out: dict = {k: {"rounds_ms": v, "mean_ms": sum(v) / len(v), "top1_hits": hits[k], "images": n}
                 for k, v in rounds_ms.items()}
    out["ratio_b_over_a"] = out[b]["mean_ms"] / out[a]["mean_ms"]
    out["by_round"] = [q / p for p, q in zip(out[a]["rounds_ms"], out[b]["rounds_ms"], strict=True)]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--model", help="a model saved by --save-model (default: random weights)")
    ap.add_argument("--arms", default="unfused,built", help=f"A,B from {sorted(ARMS)} (default: %(default)s)")
    ap.add_argument("--images", type=int, default=10_000, help="test images a round (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds (default: %(default)s)")
    ap.add_argument("--data-dir", help="CIFAR-10's folder (default: DAWNBENCH_DATA or the trainer's)")
    ap.add_argument("--batched", action="store_true",
                    help="time each arm's batched evaluation (a run's final one), not the one-image loop")
    ap.add_argument("--out", help="write the result here as JSON too")
    args = ap.parse_args(argv)
    arms = args.arms.split(",")
    if len(arms) != 2 or arms[0] == arms[1] or not set(arms) <= set(ARMS):
        ap.error(f"--arms {args.arms}: give two different arms of {sorted(ARMS)}, as A,B")
    if args.images < 1 or args.rounds < 1:
        ap.error("--images and --rounds must be at least 1")
    dev = torch.device("cpu")
    configure_process(0)  # as a trainer's process (run.json's "malloc")
    cfg, _ = with_resolved_precision(Config(eval_subset=args.images if args.images < 10_000 else 0), dev)
    try:
        data = prepare_data(load_cifar10(args.data_dir, allow_download=False), cfg, dev)
        if args.model:
            model, saved = load_model_and_config(args.model, dev)
            cfg = evaluated_as(cfg, saved)  # the TTA its runs timed it with
        else:
            torch.manual_seed(0)
            model = build_model(cfg, dev, "torch")
            model.init_whitening(data.whiten_x[:500].float(), eps=cfg.whiten_eps)
    except DataError as e:
        print(f"latency_ab: {e}", file=sys.stderr)
        return 2
    model = model.to(memory_format=torch.channels_last).eval()
    n = min(args.images, len(data.test_labels))
    if args.batched:
        out = measure_batched(model, data, cfg, arms, args.rounds)
    else:
        out = measure(model, cfg, data.test_x[:n], data.test_labels[:n].tolist(), arms, args.rounds)
    out.update(mode="batched" if args.batched else "one image a call", arms=arms, model=args.model,
               precision=cfg.precision, torch=torch.__version__,
               threads=torch.get_num_threads(), malloc=malloc_mode(), git=git_revision())
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        atomic.write_text(Path(args.out), text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
