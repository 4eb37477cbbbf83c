"""Which test-time views? Accuracy of view sets beyond airbench's six, on
trained models, at a selective-TTA threshold (a paired comparison: every set
is scored on the same weights, so the differences are the views', not a
seed's).

    python -m dawnbench_fast.cifar --save-model runs/m.pt ...   # any trained model
    python benchmarks/bench_tta_views.py runs/m0.pt runs/m1.pt [--below 0.8]

Each model's logits for the 50 views (translations by -2..2 px in each axis,
each mirrored or not; reflect padding) are computed once over the 10,000 test
images; each named set below is a weighted mean of some of them, given only
to the images whose one-view top probability is below ``--below``, as
tta.selective_tta_logits does. A study of trained models, not a timing: it
stays a script (docs/PERFORMANCE.md, "How to run, save and compare").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dawnbench_fast.cifar import Config, load_model
from dawnbench_fast.cifar.evaluation import inference_net
from dawnbench_fast.config.overrides import OneLineParser, finite_float
from dawnbench_fast.data.cifar10 import load_cifar10
from dawnbench_fast.data.cifar10_device import prepare_data
from dawnbench_fast.execution.runtime import autocast
from dawnbench_fast.training.train import batched

View = tuple[int, int, bool]  # (dy, dx, mirrored)


def _pair(dy: int, dx: int, w: float) -> dict[View, float]:
    """A translation, mirrored and not, at ``w`` each."""
    return {(dy, dx, False): w, (dy, dx, True): w}


def _ring(shifts: list[tuple[int, int]], centre: float) -> dict[View, float]:
    """The image and its mirror at ``centre`` each, the shifted pairs sharing the rest."""
    rest = (1 - 2 * centre) / (2 * len(shifts))
    return {**_pair(0, 0, centre), **{k: w for s in shifts for k, w in _pair(*s, rest).items()}}


SETS: dict[str, dict[View, float]] = {
    "one view": {(0, 0, False): 1.0},
    "mirror (2)": _pair(0, 0, 0.5),
    "airbench (6)": _ring([(-1, -1), (1, 1)], 0.25),  # tta.TTA_WEIGHTS[2]
    "both diagonals (10)": _ring([(-1, -1), (1, 1), (-1, 1), (1, -1)], 0.25),
    "axis shifts (10)": _ring([(-1, 0), (1, 0), (0, -1), (0, 1)], 0.25),
    "1-px square, equal (18)": {k: w for dy in (-1, 0, 1) for dx in (-1, 0, 1)
                                for k, w in _pair(dy, dx, 1 / 18).items()},
    "airbench + 2-px diagonal (10)": _ring([(-1, -1), (1, 1), (-2, -2), (2, 2)], 0.25),
    "2-px square, equal (50)": {k: w for dy in range(-2, 3) for dx in range(-2, 3)
                                for k, w in _pair(dy, dx, 1 / 50).items()},
}


@torch.no_grad()
def view_logits(path: str, data, cfg: Config) -> dict[View, torch.Tensor]:
    """fp32 logits of every view of every test image, by view."""
    device = torch.device("cpu")
    model = load_model(path, device).to(memory_format=torch.channels_last)
    net = inference_net(model, precision=cfg.precision)
    out: dict[View, list[torch.Tensor]] = {}
    with autocast(cfg.precision, device):
        for x, _ in batched(data.test_x, data.test_labels, 1000):
            padded = F.pad(x, (2, 2, 2, 2), mode="reflect")
            h, w = x.shape[-2:]
            for dy in range(-2, 3):
                for dx in range(-2, 3):
                    v = padded[..., 2 + dy:2 + dy + h, 2 + dx:2 + dx + w]
                    for mirrored in (False, True):
                        view = (v.flip(-1) if mirrored else v).contiguous(memory_format=torch.channels_last)
                        out.setdefault((dy, dx, mirrored), []).append(net(view).float())
    return {k: torch.cat(v) for k, v in out.items()}


def main() -> None:
    ap = OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", help="weights written by --save-model")
    ap.add_argument("--below", type=finite_float, default=0.8,
                    help="selective-TTA threshold (1 = every image)")
    args = ap.parse_args()
    cfg = Config()
    data = prepare_data(load_cifar10(None, allow_download=False), cfg, torch.device("cpu"))
    scores: dict[str, list[float]] = {name: [] for name in SETS}
    for path in args.models:
        logits = view_logits(path, data, cfg)
        one = logits[(0, 0, False)]
        unsure = (one.softmax(1).amax(1) < args.below)[:, None]
        for name, weights in SETS.items():
            full = sum(w * logits[k] for k, w in weights.items())
            pred = torch.where(unsure, full, one).argmax(1)
            scores[name].append(100 * (pred == data.test_labels).float().mean().item())
    print(f"tta_below {args.below}; top-1 % per model, then the mean")
    for name, s in scores.items():
        print(f"{name:30s} " + " ".join(f"{v:6.2f}" for v in s) + f"   mean {sum(s) / len(s):.3f}")


if __name__ == "__main__":
    main()
