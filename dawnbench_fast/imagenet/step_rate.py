"""The training step's rate on one device, with no dataset: the
recipe's ResNet, its optimiser and its step function (``task.forward_loss``,
autocast, channels_last, ``torch.compile`` on CUDA as the trainer does), fed a
synthetic batch that already lies on the device, so nothing but the step is
timed: images per second, the kernels' share of the step and the idle rest,
peak memory, with the batch per device stated.

For the GPU suite: :func:`measure_sides` at the recipe's training sides (and
:func:`measure_eval` at its validation side) gives the ``step`` section of a
projection's inputs (projection.py, docs/IMAGENET.md), e.g. per arch::

    cfg, _ = with_resolved_precision(Config(arch="resnet50"), device)   # bf16 on CUDA
    step = measure_sides(cfg, 256, device, steps=20, warmup=3, profile_steps=5)
    atomic.write_json(out / "imagenet_step_resnet50.json", {"schema_version": 1, "step": step})

(``python -m dawnbench_fast.imagenet measure --device cuda --out FILE`` does
the same from the command line.) Each side compiles once (``dynamic=False``,
as the trainer): budget for one compile per side and arch; no GPU has timed
them yet. On a CPU the same
code runs eagerly: the tests' dry run, and the short run's prediction. Each
step normalises its uint8 batch on the device, as the trainer's does.

The first steps at each side are the warm-up (compile, cuDNN's algorithm
search) and are timed apart (``warmup_s``); the rate is the median step
after them. With ``profile`` the kernel time per step is the CUDA kernels'
summed time under torch.profiler over a few more steps, and the idle share
1 - kernel / step: the launch and host gaps a CUDA graph would remove.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch

from dawnbench_fast.execution import gpu_defaults
from dawnbench_fast.execution.runtime import autocast
from dawnbench_fast.imagenet.recipe import train_resolution
from dawnbench_fast.imagenet.task import Config, build_optimizer, forward_loss, logits, net_of, normalised


@dataclass
class StepRate:
    """One side's measured step (a row of the inputs' ``step.sides``)."""

    arch: str
    side: int
    batch_per_device: int
    precision: str
    channels_last: bool
    compiled: bool
    device: str  # torch.cuda.get_device_name, or "cpu"
    steps: int  # timed steps
    step_s: float  # their median
    images_per_s: float  # batch / step_s
    warmup_s: float  # the warm-up steps together (compile included)
    kernel_s: float | None  # CUDA kernel time per step (profiled), None on a CPU
    idle_share: float | None  # 1 - kernel_s / step_s
    peak_memory_bytes: int | None  # torch.cuda.max_memory_allocated, None on a CPU

    def record(self) -> dict:
        return asdict(self)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def synthetic_batch(batch: int, side: int, classes: int, device: torch.device,
                    channels_last: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 images and labels made on ``device``, as the loader hands them
    over (channels_last) and the trainer then copies them: no copy per step."""
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randint(0, 256, (batch, 3, side, side), dtype=torch.uint8, device=device, generator=g)
    y = torch.randint(0, classes, (batch,), device=device, generator=g)
    return (x.contiguous(memory_format=torch.channels_last) if channels_last else x), y


def _kernel_seconds(step, steps: int) -> float:
    """Device time per step over ``steps`` profiled steps: every CUDA
    activity's span (kernels, copies, memsets), none of the CPU's."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    total_us = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA)
    return total_us / 1e6 / steps


def measure_step(cfg: Config, side: int, batch: int, device: torch.device, steps: int = 10,
                 warmup: int = 3, classes: int = 1000, profile_steps: int = 0) -> StepRate:
    """The median of ``steps`` training steps of ``cfg``'s net at ``side`` px,
    ``batch`` images, after ``warmup`` steps; ``cfg.precision`` must be
    resolved (bf16, fp16 or fp32) and ``cfg.compile`` is honoured as the
    trainer honours it (auto: on CUDA only)."""
    torch.manual_seed(cfg.seed)
    net = net_of(cfg, classes).to(device)
    if cfg.channels_last:
        net = net.to(memory_format=torch.channels_last)
    net.train()
    optimizer = build_optimizer(net, cfg)
    compiled = gpu_defaults.compile_enabled(cfg.compile, device)
    loss_fn = gpu_defaults.compiled(forward_loss) if compiled else forward_loss
    x, y = synthetic_batch(batch, side, classes, device, cfg.channels_last)

    def step() -> None:
        loss = loss_fn(net, normalised(x, device), y, cfg.precision, cfg.label_smoothing)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for _ in range(warmup):
        step()
    _sync(device)
    warmup_s = time.perf_counter() - start
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - t)
    step_s = statistics.median(times)
    kernel_s = _kernel_seconds(step, profile_steps) if profile_steps and device.type == "cuda" else None
    cuda = device.type == "cuda"
    idle = None if kernel_s is None else max(0.0, 1 - kernel_s / step_s)
    return StepRate(arch=cfg.arch, side=side, batch_per_device=batch, precision=cfg.precision,
                    channels_last=cfg.channels_last, compiled=compiled, device=_device_name(device),
                    steps=steps, step_s=step_s, images_per_s=batch / step_s, warmup_s=warmup_s,
                    kernel_s=kernel_s, idle_share=idle,
                    peak_memory_bytes=torch.cuda.max_memory_allocated(device) if cuda else None)


def measure_eval(cfg: Config, batch: int, device: torch.device, steps: int = 5, warmup: int = 2,
                 classes: int = 1000) -> dict:
    """The validation forward at ``cfg.val_res`` (with the mirror when
    ``cfg.tta``): images per second, the median of ``steps`` batches."""
    torch.manual_seed(cfg.seed)
    net = net_of(cfg, classes).to(device)
    if cfg.channels_last:
        net = net.to(memory_format=torch.channels_last)
    net.eval()
    x, _ = synthetic_batch(batch, cfg.val_res, classes, device, cfg.channels_last)
    times = []
    with torch.no_grad(), autocast(cfg.precision, device):
        for k in range(warmup + steps):
            t = time.perf_counter()
            logits(net, normalised(x, device), cfg.tta).float().sum().item()  # .item(): the batch is done
            if k >= warmup:
                times.append(time.perf_counter() - t)
    s = statistics.median(times)
    return {"side": cfg.val_res, "batch_per_device": batch, "tta": cfg.tta, "step_s": s,
            "images_per_s": batch / s}


def recipe_sides(cfg: Config) -> list[int]:
    """The training sides the recipe's epochs take, each once, in order."""
    epochs = max(1, int(-(-cfg.epochs // 1)))
    return list(dict.fromkeys(train_resolution(cfg, e) for e in range(epochs)))


def measure_sides(cfg: Config, batch: int, device: torch.device, sides: list[int] | None = None,
                  eval_batch: int | None = None, **kwargs) -> dict:
    """The inputs' ``step`` section (docs/IMAGENET.md, "The projection's
    inputs"): each of ``sides`` (default: the recipe's) measured by
    :func:`measure_step`, and the evaluation's rate unless ``eval_batch`` is 0."""
    rows = [measure_step(cfg, s, batch, device, **kwargs).record() for s in (sides or recipe_sides(cfg))]
    out = {"arch": cfg.arch, "width": cfg.width, "classes": kwargs.get("classes", 1000),
           "batch_per_gpu": batch, "device": _device_name(device),
           "precision": cfg.precision, "source": "measured: dawnbench_fast.imagenet.step_rate",
           "images_per_s": {str(r["side"]): r["images_per_s"] for r in rows}, "sides": rows}
    if eval_batch != 0:
        out["eval"] = measure_eval(cfg, eval_batch or batch, device, classes=kwargs.get("classes", 1000))
    return out
