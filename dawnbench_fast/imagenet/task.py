"""ImageNet's task: its data through the pipeline of dawnbench_fast.data.imagenet
(normalised on the device from uint8 batches), the config as the loop runs
it (:class:`Config`), the ResNet, SGD with Nesterov momentum under FFCV's
warm-up and linear decay, progressive resizing by epoch, and
:class:`ImageNetTask`, with top-1/top-5 evaluation at a fixed side and the
mirror as test-time augmentation. The loop, the clock, warm-up, latency, the
DAWNBench files, run.json, ``--profile-steps`` and torchrun are the ones every
task shares (dawnbench_fast.training, dawnbench_fast.reporting,
dawnbench_fast.execution.distributed); the command line is
dawnbench_fast.imagenet.cli.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from dawnbench_fast.config.precision import with_resolved_precision
from dawnbench_fast.data.cifar10 import DataError
from dawnbench_fast.data.imagenet.jpeg_turbo import get_decoder
from dawnbench_fast.data.imagenet.loader import ImageNetLoader, open_source
from dawnbench_fast.data.imagenet.source import ImageSource
from dawnbench_fast.dispatch import KernelsUnavailable
from dawnbench_fast.execution import gpu_defaults
from dawnbench_fast.execution.distributed import World, average_bn_statistics, convert_sync_batchnorm, world
from dawnbench_fast.execution.runtime import autocast, host_read_every, synchronizes
from dawnbench_fast.imagenet.preflight import report, run_preflight
from dawnbench_fast.imagenet.recipe import MEAN, STD, ImageNetRecipe, train_resolution, validate
from dawnbench_fast.models.resnet import ResNet
from dawnbench_fast.optim.schedule import set_warmup_linear_decay
from dawnbench_fast.training import checkpoint
from dawnbench_fast.training.task import (
    Deployed,
    Evaluation,
    Splits,
    StepLoss,
    epoch_steps,
    loop_epochs,
    steps_in,
)
from dawnbench_fast.training.train import accuracy

# -- Data: the places that name the pipeline (dawnbench_fast.data.imagenet) ----------


@dataclass
class ImageNetData:
    """The two splits' sources, opened once (phase ``data_load``)."""

    root: Path
    train: ImageSource  # len, labels (int64), classes (sorted synsets), read(i), name(i)
    val: ImageSource
    preflight: dict | None = None  # the warm-up's loader pre-flight (preflight.py), for run.json

    @property
    def classes(self) -> int:
        return len(self.train.classes)


def split_path(data_dir: str | None, split: str) -> Path:
    """``DIR/<split>.pack`` (a packed split, pack.py) when it exists, else the
    ImageFolder ``DIR/<split>/``; a one-line DataError when neither does."""
    if data_dir is None:
        raise DataError("--data-dir: required (a folder holding train/ and val/ ImageFolders)")
    packed, folder = Path(data_dir) / f"{split}.pack", Path(data_dir) / split
    if packed.is_file():
        return packed
    if not folder.is_dir():
        raise DataError(f"--data-dir {data_dir}: no {split}/ folder there (expected "
                        f"{split}/<synset>/<image>, or a packed {split}.pack: docs/IMAGENET.md)")
    return folder


def load_data(data_dir: str | None, decoder: str = "pil") -> ImageNetData:
    """Both splits, the validation split indexed by the training split's
    synsets; first, ``decoder`` is checked to be installed (a one-line error
    before the folders are scanned)."""
    get_decoder(decoder)
    train = open_source(split_path(data_dir, "train"))
    val = open_source(split_path(data_dir, "val"), classes=list(train.classes))
    if list(train.classes) != list(val.classes):  # a packed val file carries its own list
        raise DataError(f"--data-dir {data_dir}: train and val name different classes "
                        f"({len(train.classes)} and {len(val.classes)} synsets)")
    data = ImageNetData(Path(str(data_dir)), train, val)
    if data.classes <= 5 and world().rank == 0:  # a user's first small try: say what top-5 means then
        print(f"note: {data.classes} classes in --data-dir: top-5 counts the top {min(5, data.classes)}, "
              "which always hold the label (top-5 100%, the target met trivially); use 6 or more classes "
              "for a meaningful top-5", file=sys.stderr)
    return data


def make_loader(source: ImageSource, cfg: Config, w: World, global_batch: int,
                device: torch.device | None = None) -> ImageNetLoader:
    """One rank's loader of ``source``. Training takes the rank's share of each
    global batch; evaluation passes ``global_batch=w.size`` (its batches are per
    rank, ``val_batches``' own argument). Batches bound for a CUDA ``device``
    are built in pinned memory, so that :func:`normalised`'s non-blocking copy
    does not make the host wait each step (loader.host_buffer)."""
    pin = device is not None and device.type == "cuda"
    return ImageNetLoader(source, global_batch=global_batch, seed=cfg.seed, rank=w.rank, world_size=w.size,
                          threads=cfg.loader_threads or None, skip_bad=cfg.skip_bad, pin_memory=pin,
                          decoder=cfg.decoder)


@functools.cache
def _mean_std_255(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """ImageNet's mean and std on the 0-255 scale, made on ``device`` once (a
    per-batch torch.tensor(..., device=cuda) would be a blocking copy each step)."""
    return (torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255,
            torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255)


def normalised(images: torch.Tensor, device: torch.device) -> torch.Tensor:
    """uint8 (b, 3, s, s) images as float on ``device``, normalised there by
    ImageNet's mean and std (channels_last kept)."""
    x = images.to(device, non_blocking=True).float()
    mean, std = _mean_std_255(device)
    return ((x - mean) / std).contiguous(memory_format=torch.channels_last)


# -- The config, model, optimiser and the training task -------------------------------


@dataclass
class Config(ImageNetRecipe):
    """The recipe (every field: :class:`~dawnbench_fast.imagenet.recipe.ImageNetRecipe`)
    as the training loop runs it."""

    def build_task(self, device: torch.device) -> ImageNetTask:
        """Validate, resolve the kernels, open the data and return the task."""
        cfg, _ = _resolved(self, device)
        return ImageNetTask(cfg, load_data(cfg.data_dir, cfg.decoder), device)


def _resolved(cfg: Config, device: torch.device) -> tuple[Config, str]:
    cfg, _ = with_resolved_precision(validate(cfg), device)
    return cfg, resolve_kernels(cfg.kernels)


def resolve_kernels(choice: str) -> str:
    """``--kernels``: torch (auto means torch); our kernels are the CIFAR net's ops."""
    if choice in ("auto", "torch"):
        return "torch"
    raise KernelsUnavailable(f"--kernels {choice}: the ImageNet ResNet uses no op of the kernel catalogue "
                             "(its convolutions, batch norms and head are PyTorch's); use --kernels torch")


def net_of(cfg: Config, classes: int = 1000) -> ResNet:
    """The ResNet ``cfg`` describes, on the CPU, in PyTorch's default layout."""
    return ResNet(cfg.arch, num_classes=classes, width=cfg.width,
                  zero_init_residual=cfg.zero_init_residual, blurpool=cfg.blurpool)


def build_optimizer(net: nn.Module, cfg: Config) -> torch.optim.SGD:
    """SGD (Nesterov per ``cfg``): weight decay on the conv and linear weights
    only, none on the BN parameters and the biases (every 1-d parameter)."""
    decay = [p for p in net.parameters() if p.ndim > 1]
    no_decay = [p for p in net.parameters() if p.ndim <= 1]
    groups = [dict(params=decay, weight_decay=cfg.weight_decay), dict(params=no_decay, weight_decay=0.0)]
    return torch.optim.SGD(groups, lr=cfg.peak_lr, momentum=cfg.momentum, nesterov=cfg.nesterov)


def forward_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor, precision: str,
                 label_smoothing: float) -> torch.Tensor:
    """The step's forward under autocast and its mean label-smoothed loss over
    the rank's share (DDP averages the ranks: the global batch's mean).

    What ``compile`` compiles, handed the DDP wrapper in a torchrun job (not
    the inner net: DDP's forward must run for its gradient all-reduce).
    Dynamo breaks the graph at DDP's own forward, compiles the net's forward
    as one graph under its DDPOptimizer (split at DDP's gradient buckets, so
    the all-reduce still overlaps the backward) and the loss as another;
    tests/execution/test_compile_ddp.py trains through this on two gloo processes."""
    with autocast(precision, x.device):
        out = model(x)
    return F.cross_entropy(out.float(), y, label_smoothing=label_smoothing)


def logits(net: nn.Module, x: torch.Tensor, tta: bool) -> torch.Tensor:
    """The net's logits, plus its mirror image's with ``tta`` (FFCV's flip TTA)."""
    out = net(x)
    return out + net(torch.flip(x, dims=[3])) if tta else out


class ImageNetTask:
    """One training run of the recipe: the :class:`dawnbench_fast.training.task.Task`
    the loop drives. In a torchrun job the net is wrapped in DDP (its
    gradients averaged over the ranks, overlapped with the backward pass);
    each rank reads its share of every global batch and its val shard. With
    ``compile`` the step function is compiled around the DDP wrapper, a
    tested path (:func:`forward_loss`)."""

    def __init__(self, cfg: Config, data: ImageNetData, device: torch.device, latency_images: int = 0):
        self.cfg, self.data, self.device, self.world = cfg, data, device, world()
        self.world.batch_share(cfg.batch_size)  # a ConfigError unless it divides by the processes
        if cfg.batch_size > len(data.train):
            raise DataError(f"--batch-size {cfg.batch_size}: larger than the {len(data.train)} "
                            "training images")
        # Both loaders live as long as the run (each owns a pool of decoding threads).
        self.loader = make_loader(data.train, cfg, self.world, cfg.batch_size, device)
        self.val_loader = make_loader(data.val, cfg, self.world, self.world.size, device)
        self.skipped = 0  # unreadable images reported so far (skip_bad)
        self.epoch_steps = epoch_steps(cfg.epochs, lambda e: self.loader.steps_per_epoch)
        self.total_steps = sum(self.epoch_steps)
        self.warmup_steps = steps_in(cfg.warmup_epochs, self.loader.steps_per_epoch)
        sides = [train_resolution(cfg, e) for e in range(loop_epochs(cfg.epochs))]
        self.warm_up_epochs = tuple(sides.index(s) for s in dict.fromkeys(sides))  # one per side
        self.latency_images = latency_images  # how many val images predictor() holds
        self.splits = Splits(enabled=not synchronizes(device))  # host timings: in line with the device only
        self.host_read_every = host_read_every(device)
        self.compiled = gpu_defaults.compile_enabled(cfg.compile, device)
        self.forward_loss = gpu_defaults.compiled(forward_loss) if self.compiled else forward_loss
        self.net: ResNet | None = None
        self.step = 0
        self.step_times: list[tuple[int, float]] | None = None  # (side, s) per step: the warm-up's only

    def init_model(self) -> None:
        """The seeded ResNet on the device (synchronised BN and DDP in a torchrun job)."""
        cfg, w = self.cfg, self.world
        torch.manual_seed(cfg.seed)
        net = net_of(cfg, self.data.classes).to(self.device)
        if cfg.channels_last:
            net = net.to(memory_format=torch.channels_last)
        if cfg.sync_bn and w.distributed:
            net = convert_sync_batchnorm(net, self.device)
        self.net, self.model = net, net
        if w.distributed:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.model = nn.parallel.DistributedDataParallel(net, device_ids=ids, broadcast_buffers=False)
        self.optimizer = build_optimizer(net, cfg)
        self.optimizers = [self.optimizer]
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.precision == "fp16")
        self.step = 0

    def state_dict(self) -> dict:
        """Model, optimiser, loss scaler, step and RNG state (the data order and
        augmentation are keyed by seed, epoch and index: no state)."""
        return {"model": self.net.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict(), "step": self.step, "torch_rng": torch.get_rng_state()}

    def load_state_dict(self, state: dict) -> None:
        self.init_model()
        self.net.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.step = state["step"]
        torch.set_rng_state(state["torch_rng"])

    def learning_rates(self) -> dict[str, float]:
        decay, no_decay = self.optimizer.param_groups
        return {"weights": decay["lr"], "bn_and_biases": no_decay["lr"]}

    def epoch_batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's share of each global batch of ``epoch``, at the epoch's
        side, normalised on the device (split ``data``: decoding, augmentation
        and the copy, which the pipeline does while the clock runs)."""
        batches = iter(self.loader.train_batches(epoch, train_resolution(self.cfg, epoch)))
        while True:
            self.splits.start()
            try:
                images, labels, _ = next(batches)
            except StopIteration:
                return
            self.report_skipped()
            x, y = normalised(images, self.device), labels.to(self.device, non_blocking=True)
            self.splits.mark("data")
            yield x, y

    def report_skipped(self) -> None:
        """With ``skip_bad``: name the unreadable images found since the last call (rank 0)."""
        bad = self.loader.bad_files + self.val_loader.bad_files
        if len(bad) > self.skipped and self.world.rank == 0:
            print(f"skip_bad: {len(bad)} unreadable images left out so far (latest: {bad[-1]})",
                  file=sys.stderr)
        self.skipped = len(bad)

    def prepare_warm_up(self) -> None:
        """The warm-up task times its steps (a synchronisation each: outside the
        clock) for the pre-flight."""
        self.step_times = []

    def capture_steps(self) -> None:
        """Nothing captured: ImageNet's step is compiled, not replayed as a graph."""

    def warm_up_evaluation(self) -> None:
        """The warm-up's evaluation batch, then the loader's pre-flight
        (preflight.py) unless ``preflight_seconds`` is 0."""
        self.evaluate(tta=True, max_batches=1)
        # once a command (--runs N warms up each seed)
        if self.cfg.preflight_seconds > 0 and self.step_times and self.data.preflight is None:
            self.preflight()

    def preflight(self) -> None:
        """Time the loader against the fastest warm-up step after each side's
        first (that one compiles); printed by rank 0, kept for run.json."""
        first = {side: k for k, (side, _) in reversed(list(enumerate(self.step_times)))}
        later = [(s, side) for k, (side, s) in enumerate(self.step_times) if first[side] != k]
        seconds, side = min(later or [(s, side) for side, s in self.step_times])
        result = run_preflight(self.loader, side, seconds, self.cfg.preflight_seconds)
        report(result, self.world.main)
        self.data.preflight = result.record()

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> StepLoss:
        if self.step_times is None:
            return self._train_step(x, y)
        _synchronize(self.device)
        start = time.perf_counter()
        loss = self._train_step(x, y)
        _synchronize(self.device)
        self.step_times.append((x.shape[-1], time.perf_counter() - start))
        return loss

    def _train_step(self, x: torch.Tensor, y: torch.Tensor) -> StepLoss:
        cfg = self.cfg
        self.splits.start()
        self.model.train()
        set_warmup_linear_decay(self.optimizers, self.step, self.warmup_steps, self.total_steps)
        loss = self.forward_loss(self.model, x, y, cfg.precision, cfg.label_smoothing)
        self.splits.mark("forward")
        self.scaler.scale(loss).backward()  # DDP all-reduces the gradients during it
        self.splits.mark("backward")
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.splits.mark("optimizer")
        self.step += 1
        return StepLoss(loss.detach() * len(y), len(y))

    def evaluate(self, tta: bool, max_batches: int | None = None) -> Evaluation:
        """Top-1 and top-5 on this rank's val shard (counts summed over the
        ranks) at ``val_res``, with the mirror averaged in when ``tta``."""
        cfg, net = self.cfg, self.net
        average_bn_statistics(net, self.world)  # every rank evaluates the same model
        net.eval()
        batches = ((normalised(x, self.device), y.to(self.device, non_blocking=True))
                   for x, y, _ in self.val_loader.val_batches(cfg.val_res, cfg.eval_batch_size))
        with torch.no_grad(), autocast(cfg.precision, self.device):
            top1, top5 = accuracy(lambda x: logits(net, x, tta), islice(batches, max_batches), top5=True)
        return Evaluation(top1, top5, tta, "mirror TTA" if tta else "one view")

    @contextmanager
    def predictor(self, tta: bool) -> Iterator[Deployed]:
        """The net in eval mode, no grad, autocast; ``predict`` takes uint8
        images and normalises them on the device (part of the latency). The
        images and their labels: the first ``latency_images`` val images at
        ``val_res`` (all of val/, one process: rank 0 measures alone)."""
        cfg, net = self.cfg, self.net.eval()
        held, labels, count = [], [], 0
        with make_loader(self.data.val, cfg, World(), 1) as loader:
            for x, y, _ in loader.val_batches(cfg.val_res, cfg.eval_batch_size):
                held.append(x.to(self.device))
                labels.append(y)
                count += len(x)
                if count >= self.latency_images:
                    break
        keep = max(1, self.latency_images)
        images, labels = torch.cat(held)[:keep], torch.cat(labels)[:keep]
        with torch.no_grad(), autocast(cfg.precision, self.device):
            yield Deployed(lambda x: logits(net, normalised(x, self.device), tta), images, labels,
                           len(self.data.val))


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -- Saved weights ---------------------------------------------------------


def save_model(net: nn.Module, cfg: Config, path: str | Path, classes: int) -> None:
    """Weights plus the config (and the class count) that rebuild the net."""
    checkpoint.save(net, dataclasses.replace(cfg, extra={**cfg.extra, "classes": classes}), path)


def load_model(path: str | Path, device: str | torch.device = "cpu") -> ResNet:
    """Rebuild a net saved by ``--save-model`` (in eval mode)."""
    return checkpoint.load(path, device, Config, what="ImageNet model",
                           build=lambda cfg: net_of(cfg, cfg.extra.get("classes", 1000)))
