"""CIFAR-10 to 94%: the recipe and its command line.

    python -m dawnbench_fast.cifar                 # train, report, write files
    python -m dawnbench_fast.cifar evaluate PATH   # evaluate saved weights

Every hyperparameter lives in :class:`Config`; the CLI overrides any field with
``--set name=value`` (e.g. ``--set lr_filters=0.2 --set tta_level=0``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import nvtx
import torch
import torch.nn.functional as F

from dawnbench_fast import dispatch
from dawnbench_fast.data import augment as aug
from dawnbench_fast.data.cifar10 import MEAN, STD, Cifar10, DataError, load_cifar10
from dawnbench_fast.models.cifar_net import CifarNet, FoldedCifarNet
from dawnbench_fast.optim.muon import Muon
from dawnbench_fast.optim.schedule import set_linear_decay
from dawnbench_fast.train import NVTX_DOMAIN, LoopResult, Phases, Splits, run_epochs


@dataclass
class Config:
    """The recipe. Defaults reproduce an airbench94_muon-class run."""

    # -- data --------------------------------------------------------------
    subset: int = 0  # train on the first N training images (0 = all 50,000)
    eval_subset: int = 0  # evaluate on the first N test images (0 = all 10,000)
    translate: int = 2  # random translation, pixels (reflect padding, done once)
    flip: bool = True  # alternating flip: random in epoch 0, inverted every other epoch
    cutout: int = 0  # side of a zeroed square (0 = off; not needed for 94%)
    # -- model -------------------------------------------------------------
    widths: tuple[int, int, int] = (64, 256, 256)
    act: str = "gelu"
    whiten_kernel: int = 2  # patch size of the frozen whitening conv
    whiten_eps: float = 5e-4  # added to eigenvalues before 1/sqrt
    whiten_images: int = 5000  # training images used for the patch covariance
    whiten_bias_epochs: int = 3  # the whitening bias trains this long, then freezes
    # -- optimisation --------------------------------------------------------
    epochs: int = 8
    batch_size: int = 2000
    lr_filters: float = 0.24  # Muon, conv filters
    muon_momentum: float = 0.6
    ns_steps: int = 3  # Newton-Schulz iterations
    lr_bias: float = 0.053  # Nesterov SGD, whitening and BN biases
    lr_head: float = 0.67  # Nesterov SGD, linear head
    sgd_momentum: float = 0.85
    weight_decay: float = 2e-6  # per example: scaled by batch_size (summed loss)
    label_smoothing: float = 0.2
    # -- evaluation ----------------------------------------------------------
    tta_level: int = 2  # 0: plain, 1: + mirror, 2: + mirror and +-1 px shifts (6 views)
    log_eval_tta: bool = False  # TTA also in the intermediate (log) evaluations
    eval_every: int = 1  # evaluate every N epochs for the log (0: final only)
    eval_batch_size: int = 2000
    target: float = 0.94
    # -- execution -------------------------------------------------------------
    seed: int = 0
    device: str = "auto"  # auto, cpu, cuda, cuda:N
    kernels: str = "auto"  # auto, torch, triton, cuda, cpu (DESIGN.md)
    precision: str = "bf16"  # bf16 / fp16 autocast, or fp32
    channels_last: bool = True
    threads: int = 0  # CPU threads (0 = PyTorch's default)
    data_dir: str | None = None
    download: bool = True
    extra: dict = field(default_factory=dict)  # free-form notes kept in run.json

    def total_steps(self, n_train: int) -> int:
        return self.epochs * self.steps_per_epoch(n_train)

    def steps_per_epoch(self, n_train: int) -> int:
        return max(1, n_train // self.batch_size)


class ConfigError(ValueError):
    """A bad configuration value, in one line naming the flag."""


def parse_value(name: str, text: str, current: object) -> object:
    """Parse ``--set name=text`` by the type of the field's current value."""
    if isinstance(current, bool):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"--set {name}={text}: expected true or false")
    try:
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
        if isinstance(current, tuple):
            return tuple(int(v) for v in text.split(","))
    except ValueError:
        kind = "comma-separated integers" if isinstance(current, tuple) else type(current).__name__
        raise ConfigError(f"--set {name}={text}: expected {kind}") from None
    if current is None or isinstance(current, str):
        return None if text.lower() == "none" else text
    raise ConfigError(f"--set {name}: this field cannot be set from the command line")


def apply_overrides(cfg: Config, pairs: list[str]) -> Config:
    names = {f.name for f in dataclasses.fields(cfg)} - {"extra"}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set {pair}: expected name=value")
        name, text = pair.split("=", 1)
        if name not in names:
            raise ConfigError(f"--set {name}: unknown field; known: {', '.join(sorted(names))}")
        cfg = dataclasses.replace(cfg, **{name: parse_value(name, text, getattr(cfg, name))})
    return validate(cfg)


def validate(cfg: Config) -> Config:
    checks = [
        (cfg.epochs >= 1, "epochs", "must be >= 1"),
        (cfg.batch_size >= 1, "batch_size", "must be >= 1"),
        (cfg.subset >= 0, "subset", "must be >= 0"),
        (cfg.eval_subset >= 0, "eval_subset", "must be >= 0"),
        (cfg.tta_level in (0, 1, 2), "tta_level", "must be 0, 1 or 2"),
        (cfg.precision in ("bf16", "fp16", "fp32"), "precision", "must be bf16, fp16 or fp32"),
        (cfg.kernels in dispatch.KERNEL_CHOICES, "kernels", f"must be one of {dispatch.KERNEL_CHOICES}"),
        (0.0 < cfg.target <= 1.0, "target", "must be in (0, 1]"),
        (len(cfg.widths) == 3 and min(cfg.widths) > 0, "widths", "needs three positive widths"),
        (cfg.act in ("gelu", "relu", "silu"), "act", "must be gelu, relu or silu"),
        (0 <= cfg.cutout <= 32 and 0 <= cfg.translate <= 8, "cutout/translate", "out of range"),
        (cfg.threads >= 0, "threads", "must be >= 0"),
    ]
    for ok, name, why in checks:
        if not ok:
            raise ConfigError(f"{name}={getattr(cfg, name, '')}: {why}")
    return cfg


# ---------------------------------------------------------------------------
# Data on the device
# ---------------------------------------------------------------------------


@dataclass
class DeviceData:
    """Everything a run needs, already in (device) memory."""

    padded: torch.Tensor  # uint8 NHWC, reflect-padded by cfg.translate
    train_labels: torch.Tensor
    test_x: torch.Tensor  # normalised float, channels_last
    test_labels: torch.Tensor
    whiten_x: torch.Tensor  # normalised, unaugmented training images for init
    scale: torch.Tensor
    shift: torch.Tensor


def prepare_data(ds: Cifar10, cfg: Config, device: torch.device) -> DeviceData:
    n = cfg.subset or len(ds.train_images)
    m = cfg.eval_subset or len(ds.test_images)
    if n > len(ds.train_images) or m > len(ds.test_images):
        raise ConfigError(f"--subset {n} / --eval-subset {m}: larger than the dataset")
    scale_np, shift_np = aug.normalisation(MEAN, STD)
    scale, shift = torch.from_numpy(scale_np), torch.from_numpy(shift_np)

    def normalise(u8: np.ndarray) -> torch.Tensor:
        x = torch.from_numpy(u8).to(device).float() * scale.to(device) + shift.to(device)
        return x.permute(0, 3, 1, 2)  # channels_last memory

    train = ds.train_images[:n]
    return DeviceData(
        padded=torch.from_numpy(aug.pad_reflect(train, cfg.translate)).to(device),
        train_labels=torch.from_numpy(ds.train_labels[:n]).to(device),
        test_x=normalise(ds.test_images[:m]),
        test_labels=torch.from_numpy(ds.test_labels[:m]).to(device),
        whiten_x=normalise(train[: cfg.whiten_images]),
        scale=scale.to(device),
        shift=shift.to(device),
    )


def autocast(cfg: Config, device: torch.device):
    if cfg.precision == "fp32":
        return nullcontext()
    dtype = torch.bfloat16 if cfg.precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


# ---------------------------------------------------------------------------
# Model, optimisers, one training step
# ---------------------------------------------------------------------------


def build_model(cfg: Config, device: torch.device, backend: str) -> CifarNet:
    model = CifarNet(widths=cfg.widths, whiten_kernel=cfg.whiten_kernel, act=cfg.act)
    model = model.to(device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model.set_kernels(backend)


def build_optimizers(model: CifarNet, cfg: Config, whiten_bias_steps: int = 0,
                     backend: str = "torch") -> list[torch.optim.Optimizer]:
    """Muon on the conv filters; Nesterov SGD on biases and head. The whitening
    bias's lr reaches 0 when it freezes (after ``whiten_bias_steps``)."""
    filters = [p for p in model.parameters() if p.ndim == 4 and p.requires_grad]
    norm_biases = [
        p for n, p in model.named_parameters() if ".norm" in n and p.requires_grad
    ]
    wd = cfg.weight_decay * cfg.batch_size
    groups = [
        dict(params=[model.whiten.bias], lr=cfg.lr_bias, weight_decay=wd / cfg.lr_bias,
             decay_steps=whiten_bias_steps),
        dict(params=norm_biases, lr=cfg.lr_bias, weight_decay=wd / cfg.lr_bias),
        dict(params=[model.head.weight], lr=cfg.lr_head, weight_decay=wd / cfg.lr_head),
    ]
    sgd = torch.optim.SGD(groups, momentum=cfg.sgd_momentum, nesterov=True)
    muon = Muon(filters, lr=cfg.lr_filters, momentum=cfg.muon_momentum, ns_steps=cfg.ns_steps,
                orthogonalize=dispatch.get_op("newton_schulz", backend))
    return [sgd, muon]


class Trainer:
    """The state of one training run and its step."""

    def __init__(self, cfg: Config, data: DeviceData, device: torch.device, backend: str):
        self.cfg, self.data, self.device, self.backend = cfg, data, device, backend
        self.n_train = len(data.train_labels)
        self.batch = min(cfg.batch_size, self.n_train)
        self.steps_per_epoch = max(1, self.n_train // self.batch)
        self.total_steps = cfg.epochs * self.steps_per_epoch
        self.whiten_bias_steps = cfg.whiten_bias_epochs * self.steps_per_epoch
        self.augment = dispatch.get_op("augment", backend)
        self.step = 0
        self.model: CifarNet | None = None
        self.splits = Splits(enabled=device.type == "cpu")

    def init_model(self) -> None:
        """Build the net from the seed and set its whitening filters."""
        torch.manual_seed(self.cfg.seed)
        self.model = build_model(self.cfg, self.device, self.backend)
        self.model.init_whitening(self.data.whiten_x, eps=self.cfg.whiten_eps)
        self.optimizers = build_optimizers(self.model, self.cfg, self.whiten_bias_steps, self.backend)
        self.step = 0

    def epoch_batches(self, epoch: int):
        """(indices, augmented images) for each step of ``epoch``."""
        cfg = self.cfg
        order = np.random.default_rng([cfg.seed, epoch]).permutation(self.n_train)
        for i in range(self.steps_per_epoch):
            self.splits.start()
            idx = order[i * self.batch : (i + 1) * self.batch]
            p = aug.augment_params(cfg.seed, epoch, idx, cfg.translate, cfg.flip, cfg.cutout)
            x = self.augment(self.data.padded, torch.from_numpy(idx), p, self.data.scale, self.data.shift)
            self.splits.mark("augment")
            yield torch.from_numpy(idx).to(self.device), x

    def train_step(self, idx: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        cfg, model = self.cfg, self.model
        self.splits.start()
        model.train()
        with autocast(cfg, self.device):
            out = model(x, whiten_bias_grad=self.step < self.whiten_bias_steps)
        y = self.data.train_labels[idx]
        loss = F.cross_entropy(out.float(), y, label_smoothing=cfg.label_smoothing, reduction="sum")
        self.splits.mark("forward")
        loss.backward()
        self.splits.mark("backward")
        set_linear_decay(self.optimizers, self.step, self.total_steps)
        for opt in self.optimizers:
            opt.step()
        model.zero_grad(set_to_none=True)
        self.splits.mark("optimizer")
        self.step += 1
        return loss.detach()

    def train_epoch(self, epoch: int, progress=None) -> None:
        for idx, x in self.epoch_batches(epoch):
            with nvtx.annotate("train_step", domain=NVTX_DOMAIN):
                loss = self.train_step(idx, x)
            if progress is not None:
                progress.update(1)
                progress.set_postfix(epoch=epoch + 1, loss=f"{loss.item() / len(idx):.3f}")


# ---------------------------------------------------------------------------
# Evaluation with test-time augmentation
# ---------------------------------------------------------------------------


def tta_logits(model: torch.nn.Module, x: torch.Tensor, level: int) -> torch.Tensor:
    """Level 0: one view. 1: mean with the mirror. 2: 0.5 x mirrored pair +
    0.25 x each mirrored pair shifted by -1 and +1 px (reflect padding)."""

    def mirrored(v: torch.Tensor) -> torch.Tensor:
        return 0.5 * model(v) + 0.5 * model(v.flip(-1))

    if level == 0:
        return model(x)
    if level == 1:
        return mirrored(x)
    padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
    h, w = x.shape[-2:]
    shifted = [padded[..., :h, :w], padded[..., 2:, 2:]]
    return 0.5 * mirrored(x) + 0.25 * (mirrored(shifted[0]) + mirrored(shifted[1]))


def inference_net(model: CifarNet) -> FoldedCifarNet:
    """The trained net with BN folded into the convs, for evaluation and latency."""
    model.eval()
    return FoldedCifarNet(model).to(memory_format=torch.channels_last)


@torch.no_grad()
def evaluate(
    model: torch.nn.Module, data: DeviceData, cfg: Config, device: torch.device, tta_level: int
) -> float:
    """Top-1 accuracy on the (sub)set of test images (BN folded first)."""
    if isinstance(model, CifarNet):
        model = inference_net(model)
    correct = 0
    with autocast(cfg, device):
        for i in range(0, len(data.test_x), cfg.eval_batch_size):
            x = data.test_x[i : i + cfg.eval_batch_size]
            logits = tta_logits(model, x, tta_level)
            correct += (logits.argmax(1) == data.test_labels[i : i + len(x)]).sum().item()
    return correct / len(data.test_x)


# ---------------------------------------------------------------------------
# A whole run
# ---------------------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"--device {name}: not a device name (use auto, cpu or cuda)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: CUDA is not available here; use --device cpu")
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"--device {name}: only cpu and cuda are supported")
    return dev


def set_threads(n: int) -> None:
    if n > 0:
        torch.set_num_threads(n)
        import numba

        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


@dataclass
class RunOutcome:
    cfg: Config
    backend: str
    result: LoopResult
    phases: dict[str, float]
    trainer: Trainer


def warm_up(cfg: Config, data: DeviceData, device: torch.device, backend: str) -> None:
    """A throwaway model runs two steps and one eval batch so that one-off
    costs (kernel selection, JIT compilation, allocator growth) stay out of
    the clock. Its weights are discarded."""
    warm_cfg = dataclasses.replace(cfg, epochs=1)
    t = Trainer(warm_cfg, data, device, backend)
    t.init_model()
    for k, (idx, x) in enumerate(t.epoch_batches(0)):
        t.train_step(idx, x)
        if k == 1:
            break
    with torch.no_grad(), autocast(cfg, device):
        tta_logits(inference_net(t.model), data.test_x[: cfg.eval_batch_size], cfg.tta_level)


def train_run(
    cfg: Config,
    data: DeviceData,
    device: torch.device,
    backend: str,
    phases: Phases,
    progress: bool = True,
) -> RunOutcome:
    with phases.timed("warmup"):
        warm_up(cfg, data, device, backend)
    trainer = Trainer(cfg, data, device, backend)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=trainer.total_steps, desc=f"seed {cfg.seed}", unit="step", leave=False)

    def do_eval(epoch: int, final: bool) -> tuple[float, None, bool]:
        level = cfg.tta_level if (final or cfg.log_eval_tta) else 0
        acc = evaluate(trainer.model, data, cfg, device, level)
        line = (f"seed {cfg.seed} epoch {epoch + 1}/{cfg.epochs}: test top-1 {100 * acc:.2f}% "
                f"(tta_level {level}), train clock {phases.seconds['init'] + phases.seconds['train']:.1f} s")
        if bar is not None:
            bar.write(line)
        else:
            print(line, flush=True)
        return acc, None, level > 0

    result = run_epochs(
        epochs=cfg.epochs,
        init=trainer.init_model,
        train_epoch=lambda e: trainer.train_epoch(e, bar),
        evaluate=do_eval,
        eval_every=cfg.eval_every,
        target=cfg.target,
        phases=phases,
    )
    if bar is not None:
        bar.close()
    return RunOutcome(cfg, backend, result, dict(phases.seconds), trainer)


def loss_trajectory(cfg: Config, steps: int, device: str | torch.device = "cpu") -> list[float]:
    """Per-example training loss of the first ``steps`` steps (no eval, no
    warm-up): for comparing kernel backends on the same seed and data."""
    cfg = validate(cfg)
    dev = torch.device(device)
    backend = dispatch.resolve_backend(cfg.kernels, dev)
    data = prepare_data(load_cifar10(cfg.data_dir, cfg.download), cfg, dev)
    t = Trainer(cfg, data, dev, backend)
    t.init_model()
    losses: list[float] = []
    epoch = 0
    while len(losses) < steps:
        for idx, x in t.epoch_batches(epoch):
            losses.append(t.train_step(idx, x).item() / len(idx))
            if len(losses) == steps:
                break
        epoch += 1
    return losses


# ---------------------------------------------------------------------------
# Saved weights
# ---------------------------------------------------------------------------


def save_model(model: CifarNet, cfg: Config, path: str | os.PathLike) -> None:
    """Weights plus the config that rebuilds the net, written atomically."""
    from dawnbench_fast.bench import atomic_path

    payload = {"config": dataclasses.asdict(cfg), "state_dict": model.state_dict()}
    with atomic_path(Path(path)) as tmp:
        torch.save(payload, tmp)


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu") -> CifarNet:
    """Rebuild a net saved by ``--save-model`` (in eval mode)."""
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
        fields = {f.name for f in dataclasses.fields(Config)}
        cfg = Config(**{k: v for k, v in payload["config"].items() if k in fields})
        model = CifarNet(widths=tuple(cfg.widths), whiten_kernel=cfg.whiten_kernel, act=cfg.act)
        model.load_state_dict(payload["state_dict"])
    except FileNotFoundError:
        raise DataError(f"{path}: no such model file; pass a file written by --save-model") from None
    except Exception as e:
        raise DataError(f"{path}: not a dawnbench_fast CIFAR model ({type(e).__name__})") from e
    return model.to(device).eval()


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

PROG = "python -m dawnbench_fast.cifar"
MODEL_NAME = "CifarNet-airbench94-muon-class"


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag or value is one line on stderr and exit 2."""

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Train the fast CIFAR-10 net to --target test accuracy and write a "
        "DAWNBench report (time-to-accuracy, cost, one-image latency, TSV + JSON). "
        "Subcommand: `evaluate PATH` evaluates weights saved with --save-model.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    d = Config()
    g = p.add_argument_group("data")
    g.add_argument("--data-dir", help="CIFAR-10 folder (binary or cifar-10-batches-py layout); "
                   "default: $DAWNBENCH_DATA, then the per-user cache, then download")
    g.add_argument("--no-download", action="store_true", help="never download the dataset")
    g.add_argument("--subset", type=int, default=d.subset, metavar="N",
                   help="train on the first N training images (0 = all)")
    g.add_argument("--eval-subset", type=int, default=d.eval_subset, metavar="N",
                   help="evaluate on the first N test images (0 = all)")
    g = p.add_argument_group("training")
    g.add_argument("--epochs", type=int, default=d.epochs, help="training epochs")
    g.add_argument("--batch-size", type=int, default=d.batch_size, help="training batch size")
    g.add_argument("--seed", type=int, default=d.seed, help="seed of the (first) run")
    g.add_argument("--runs", type=int, default=1, metavar="N",
                   help="run seeds seed..seed+N-1 and report mean +- std")
    g.add_argument("--target", type=float, default=d.target, help="test top-1 accuracy target")
    g.add_argument("--eval-every", type=int, default=d.eval_every, metavar="N",
                   help="evaluate every N epochs for the log (0 = final epoch only)")
    g.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override any recipe field (see --show-config), e.g. --set lr_filters=0.2")
    g.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    g = p.add_argument_group("execution")
    g.add_argument("--device", default=d.device, help="auto, cpu, cuda or cuda:N")
    g.add_argument("--kernels", default=d.kernels, choices=dispatch.KERNEL_CHOICES,
                   help="which implementation of our custom ops to use (torch = reference)")
    g.add_argument("--threads", type=int, default=d.threads,
                   help="CPU threads for PyTorch and numba (0 = all cores)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("report")
    g.add_argument("--out", default="runs/cifar10", help="folder for the TSV, JSON and run.json files")
    g.add_argument("--cost-per-hour", type=float, default=None, metavar="USD",
                   help="instance price, for training and inference cost")
    g.add_argument("--latency-images", type=int, default=10_000, metavar="N",
                   help="test images classified one at a time for the latency (0 = skip)")
    g.add_argument("--latency-tta", action="store_true",
                   help="measure latency with the run's test-time augmentation")
    g.add_argument("--author", default="dawnbench_fast", help="author field and file-name prefix")
    g.add_argument("--email", default="", help="authorEmail field")
    g.add_argument("--hardware-tag", default=None,
                   help="hardware part of the file names (default: from the device)")
    g.add_argument("--save-model", metavar="PATH",
                   help="save the final weights (with --runs N: PATH gets _seedK)")
    g.add_argument("--profile-steps", type=int, default=0, metavar="N",
                   help="instead of training, profile N training steps and write a "
                   "roofline report into OUT/profile")
    return p


def build_eval_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"{PROG} evaluate", description="Evaluate weights saved with --save-model.",
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("path", help="model file written by --save-model")
    p.add_argument("--data-dir", help="CIFAR-10 folder (default as for training)")
    p.add_argument("--no-download", action="store_true", help="never download the dataset")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--tta-level", type=int, default=2, choices=(0, 1, 2), help="test-time augmentation")
    p.add_argument("--eval-subset", type=int, default=0, metavar="N", help="first N test images")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0 = all cores)")
    return p


def config_from_args(a: argparse.Namespace) -> Config:
    cfg = Config(
        subset=a.subset, eval_subset=a.eval_subset, epochs=a.epochs, batch_size=a.batch_size,
        seed=a.seed, target=a.target, eval_every=a.eval_every, device=a.device,
        kernels=a.kernels, threads=a.threads, data_dir=a.data_dir, download=not a.no_download,
    )
    return apply_overrides(cfg, a.set)


def _check_args(a: argparse.Namespace) -> None:
    for flag, value, low in (("--runs", a.runs, 1), ("--latency-images", a.latency_images, 0),
                             ("--profile-steps", a.profile_steps, 0)):
        if value < low:
            raise ConfigError(f"{flag} {value}: must be >= {low}")
    if a.cost_per_hour is not None and a.cost_per_hour < 0:
        raise ConfigError(f"--cost-per-hour {a.cost_per_hour}: must be >= 0")


def run_cli(a: argparse.Namespace) -> int:
    from dawnbench_fast import bench

    _check_args(a)
    cfg = config_from_args(a)
    if a.show_config:
        print(json_dumps(dataclasses.asdict(cfg)))
        return 0
    set_threads(cfg.threads)
    device = resolve_device(cfg.device)
    backend = dispatch.resolve_backend(cfg.kernels, device)
    phases = Phases(device)
    with phases.timed("data_load"):
        ds = load_cifar10(cfg.data_dir, cfg.download)
        data = prepare_data(ds, cfg, device)
    if not ds.verified:
        print(f"note: {ds.root}: files are not byte-identical to the originals "
              "(contents validated)", file=sys.stderr)
    out = Path(a.out)
    if a.profile_steps:
        return profile_cli(cfg, data, device, backend, a.profile_steps, out / "profile")

    env = bench.environment(device)
    hardware = env["hardware"]
    tag = a.hardware_tag or bench.slug(hardware)
    stem = bench.submission_names(a.author, MODEL_NAME, tag, "pytorch")
    ops = dispatch.op_table(backend, ["augment", "conv_group", "bn_act", "linear", "newton_schulz"])
    summaries = []
    for k in range(a.runs):
        run_cfg = dataclasses.replace(cfg, seed=cfg.seed + k)
        run_phases = Phases(device)
        run_phases.add("data_load", phases.seconds["data_load"])
        o = train_run(run_cfg, data, device, backend, run_phases, progress=not a.no_progress)
        model = o.trainer.model
        lat_ms = lat_n = None
        infer_top1 = o.result.final.top1
        if a.latency_images:
            level = cfg.tta_level if a.latency_tta else 0
            if level != cfg.tta_level:
                with run_phases.timed("inference_eval"):
                    infer_top1 = evaluate(model, data, cfg, device, level)
            with run_phases.timed("latency"), torch.no_grad(), autocast(cfg, device):
                net = inference_net(model)
                lat_ms, lat_n = bench.one_image_latency(
                    lambda x, m=net, lv=level: tta_logits(m, x, lv), data.test_x, a.latency_images, device)
        run_dir = out / f"seed{run_cfg.seed}" if a.runs > 1 else out
        misc = {
            "optimizer": "Muon (conv filters) + Nesterov SGD (biases, head)",
            "schedule": f"linear decay to 0 over {cfg.epochs} epochs, batch {cfg.batch_size}",
            "precision": cfg.precision, "kernels": backend, "seed": run_cfg.seed,
            "tta_level": cfg.tta_level, "versions": env["versions"], "git": env["git"]["sha"],
        }
        base = bench.train_json(author=a.author, email=a.email, model=MODEL_NAME, hardware=hardware,
                                cost_per_hour=a.cost_per_hour, log_filename=f"{stem}.tsv", misc=misc)
        bench.write_text(run_dir / f"{stem}.tsv", bench.tsv_text(o.result.rows))
        bench.write_json(run_dir / f"{stem}.json", base)
        if lat_ms is not None:
            inf = bench.inference_json(base, lat_ms, infer_top1, a.cost_per_hour)
            inf["misc"] = {**misc, "latency_images": lat_n, "latency_tta": a.latency_tta,
                           "cost_per_10000_images": None if inf["cost"] is None else inf["cost"] * 1e4}
            bench.write_json(run_dir / f"{stem}_inference.json", inf)
        tta_s = o.result.tta_seconds
        summary = {
            "seed": run_cfg.seed,
            "final_top1": o.result.final.top1,
            "reached_target": tta_s is not None,
            "tta_seconds": tta_s,
            "tta_epoch": o.result.tta_epoch,
            "train_cost_usd": None if (tta_s is None or a.cost_per_hour is None)
            else tta_s / 3600 * a.cost_per_hour,
            "latency_ms": lat_ms,
            "latency_images": lat_n,
            "inference_top1": infer_top1,
            "inference_cost_usd_per_image": inf["cost"] if lat_ms is not None else None,
            "phases_seconds": dict(run_phases.seconds),
            "train_split_seconds": dict(o.trainer.splits.seconds),
            "conv_wgrad_methods": conv_wgrad_methods(backend),
            "epochs": [dataclasses.asdict(r) | {"hours": r.hours} for r in o.result.rows],
        }
        run_json = {
            **env, "config": dataclasses.asdict(run_cfg), "kernels_backend": backend,
            "ops": ops, "data": {"root": str(ds.root), "layout": ds.layout,
                                 "verified_md5": ds.verified},
            "result": summary,
        }
        bench.write_json(run_dir / "run.json", run_json)
        if a.save_model:
            path = Path(a.save_model)
            if a.runs > 1:
                path = path.with_name(f"{path.stem}_seed{run_cfg.seed}{path.suffix}")
            save_model(model, run_cfg, path)
        summaries.append(summary)
        print(run_line(summary, cfg.target), flush=True)
    print(report_text(summaries, cfg, a.cost_per_hour, hardware, backend))
    if a.runs > 1:
        bench.write_json(out / "summary.json", {"config": dataclasses.asdict(cfg), "runs": summaries})
    print(f"reports written to {out}/")
    return 0


def conv_wgrad_methods(backend: str) -> dict[str, str]:
    """The weight-gradient method the cpu conv chose per shape (run.json)."""
    if backend != "cpu":
        return {}
    from dawnbench_fast.models import conv_cpu

    return conv_cpu.chosen_methods()


def json_dumps(obj: object) -> str:
    import json

    return json.dumps(obj, indent=2, default=str)


def run_line(s: dict, target: float) -> str:
    from dawnbench_fast.bench import fmt_seconds

    return (f"seed {s['seed']}: final top-1 {100 * s['final_top1']:.2f}%, time to "
            f"{100 * target:.2f}%: {fmt_seconds(s['tta_seconds'])}")


def report_text(runs: list[dict], cfg: Config, cost_per_hour: float | None, hardware: str,
                backend: str) -> str:
    from dawnbench_fast import bench

    rows = []
    for s in runs:
        lat = "-" if s["latency_ms"] is None else f"{s['latency_ms']:.3f}"
        rows.append([str(s["seed"]), f"{100 * s['final_top1']:.2f}",
                     "-" if s["tta_seconds"] is None else f"{s['tta_seconds']:.1f}",
                     str(s["tta_epoch"] or "-"), bench.fmt_cost(s["train_cost_usd"]), lat])
    lines = [f"\nDAWNBench CIFAR-10 report: {hardware}, kernels={backend}, "
             f"precision={cfg.precision}, target {100 * cfg.target:.2f}% top-1",
             bench.table(["seed", "top-1 %", "TTA s", "epoch", "train cost", "latency ms"], rows)]
    accs = [100 * s["final_top1"] for s in runs]
    reached = [s["tta_seconds"] for s in runs if s["tta_seconds"] is not None]
    m, sd = bench.mean_std(accs)
    lines.append(f"\nfinal top-1: {m:.2f} +- {sd:.2f}% over {len(runs)} run(s); "
                 f"reached target: {len(reached)}/{len(runs)}")
    if reached:
        tm, tsd = bench.mean_std(reached)
        lines.append(f"time to target (runs that reached it): {tm:.1f} +- {tsd:.1f} s")
        if cost_per_hour is not None:
            lines.append(f"training cost: ${tm / 3600 * cost_per_hour:.4f} per run")
    lat = [s["latency_ms"] for s in runs if s["latency_ms"] is not None]
    if lat:
        lm, _ = bench.mean_std(lat)
        cost = "" if cost_per_hour is None else (
            f"; inference cost ${cost_per_hour * lm / 3.6e6:.3e}/image, "
            f"${cost_per_hour * lm / 3.6e6 * 1e4:.4f} per 10,000")
        lines.append(f"one-image latency: {lm:.3f} ms (top-1 {100 * runs[-1]['inference_top1']:.2f}%)"
                     + cost)
    ph: dict[str, list[float]] = {}
    for s in runs:
        for k, v in s["phases_seconds"].items():
            ph.setdefault(k, []).append(v)
    for s in runs:
        for k, v in s["train_split_seconds"].items():
            ph.setdefault(f"  train: {k}", []).append(v)
    lines.append("\nwhere the time goes (mean seconds per run; the clock = init + train + decide_eval):")
    lines.append(bench.table(["phase", "seconds"],
                             [[k, f"{bench.mean_std(v)[0]:.2f}"] for k, v in ph.items()]))
    return "\n".join(lines)


def profile_cli(cfg: Config, data: DeviceData, device: torch.device, backend: str, steps: int,
                out: Path) -> int:
    from dawnbench_fast import roofline

    trainer = Trainer(cfg, data, device, backend)
    trainer.init_model()
    batches = iter(())

    def step():
        nonlocal batches
        item = next(batches, None)
        if item is None:
            batches = trainer.epoch_batches(trainer.step // trainer.steps_per_epoch)
            item = next(batches)
        trainer.train_step(*item)

    report_dir = roofline.profile_training(step, steps, out, device=str(device))
    print(f"roofline report written to {report_dir}/")
    return 0


def evaluate_cli(a: argparse.Namespace) -> int:
    set_threads(a.threads)
    device = resolve_device(a.device)
    model = load_model(a.path, device)
    cfg = Config(eval_subset=a.eval_subset, device=a.device)
    ds = load_cifar10(a.data_dir, not a.no_download)
    data = prepare_data(ds, cfg, device)
    model = model.to(memory_format=torch.channels_last)
    acc = evaluate(model, data, cfg, device, a.tta_level)
    print(f"{a.path}: top-1 {100 * acc:.2f}% on {len(data.test_x)} test images "
          f"(tta_level {a.tta_level})")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv and argv[0] == "evaluate":
            return evaluate_cli(build_eval_parser().parse_args(argv[1:]))
        return run_cli(build_parser().parse_args(argv))
    except (DataError, ConfigError, dispatch.KernelsUnavailable) as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
