"""Data-parallel training for every trainer, in processes started by torchrun.

    torchrun --nproc-per-node 8 -m dawnbench_fast.imagenet --data-dir DIR ...
    torchrun --nproc-per-node 2 -m dawnbench_fast.cifar ...

:func:`init_from_env` reads torchrun's environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, the rendezvous address) and joins the
process group: NCCL on CUDA (each process on GPU ``LOCAL_RANK``), gloo on the
CPU. Without torchrun (``WORLD_SIZE`` unset or 1) nothing is initialised and
:func:`world` is the one-process :class:`World`: every collective below is
then skipped, so a plain run computes exactly what it computed before this
module existed (tests/cifar/test_behaviour_pin.py pins it bit for bit).

The rules every trainer follows (docs/USAGE.md, "Data parallel, for both trainers"; docs/ARCHITECTURE.md):

- **The global batch does not depend on the number of processes.** A step's
  global batch (its images, their augmentation, keyed by seed, epoch and
  image index) is what one process would train on; rank r takes the r-th
  contiguous share of it (:meth:`World.batch_share`), so the batch size must
  divide by the number of processes.
- **Gradients are summed over the ranks before the optimiser step.** ImageNet
  wraps its ResNet in DDP, which overlaps its bucketed all-reduce with the
  backward pass (ResNet-50 sends 102 MB of fp32 gradients a step) and averages
  them; the per-rank loss is the mean over the rank's share, so the average is
  the global batch's mean. CIFAR sums its loss over the batch and calls
  :func:`allreduce_grads` (bucketed, summed) between backward and the step:
  its Muon optimiser, custom-op layers, compiled forward and a whitening bias
  that stops taking gradients part-way through all stay as they are, and its
  net's 2 M parameters leave little for an overlap to hide.
- **BatchNorm statistics are per rank** by default: each rank normalises its
  share with its own batch statistics (as DDP does unless told otherwise), so
  an N-process run trains like a one-process run with "ghost" batch norm over
  N slices. ImageNet's ``sync_bn`` synchronises them (torch's SyncBatchNorm on
  CUDA, :class:`SyncBatchNorm` here on the CPU); the CIFAR net's fused BN ops
  have no synchronised form. Before an evaluation the running statistics are
  averaged over the ranks (:func:`average_bn_statistics`), so every rank
  evaluates the same model.
- **Evaluation is sharded** (:meth:`World.shard`) and its counts summed
  (:meth:`World.sum_counts`); **only rank 0 writes** reports, logs,
  checkpoints and saved weights, prints, and measures the one-image latency.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from dawnbench_fast.config.overrides import ConfigError

# Gradients per all-reduce (DDP's default bucket size).
BUCKET_BYTES = 25 * 2**20


@dataclass(frozen=True)
class World:
    """This process's place among the ranks of a torchrun job."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    backend: str | None = None  # "nccl", "gloo"; None: one process, no process group
    device: str = "cpu"  # where the collectives' tensors live (NCCL: this rank's GPU)

    @property
    def main(self) -> bool:
        """Rank 0: the one that writes and prints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def record(self) -> dict:
        """run.json's ``world``."""
        return {"world_size": self.size, "processes_per_node": self.local_size,
                "nodes": max(1, self.size // max(1, self.local_size)), "backend": self.backend,
                "launcher": "torchrun" if self.distributed else None, "written_by_rank": 0}

    def batch_share(self, batch: int) -> slice:
        """This rank's contiguous share of a global batch of ``batch`` items."""
        if batch % self.size:
            raise ConfigError(f"--batch-size {batch}: must divide by the {self.size} processes "
                              "(each takes an equal share of the global batch)")
        per = batch // self.size
        return slice(self.rank * per, (self.rank + 1) * per)

    def shard(self, n: int) -> slice:
        """This rank's contiguous share of ``n`` evaluation items (the first
        ``n % size`` ranks take one more)."""
        base, extra = divmod(n, self.size)
        start = self.rank * base + min(self.rank, extra)
        return slice(start, start + base + (self.rank < extra))

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` summed over the ranks, in place (itself in one process)."""
        if self.distributed:
            dist.all_reduce(t)
        return t

    def sum_counts(self, counts: Iterable[int]) -> list[int]:
        """Integers summed over the ranks (evaluation counts)."""
        counts = list(counts)
        if not self.distributed:
            return counts
        t = torch.tensor(counts, dtype=torch.int64, device=self.device)
        return [int(v) for v in self.sum_(t).tolist()]

    def sum_float(self, value: torch.Tensor) -> torch.Tensor:
        """A scalar summed over the ranks, as a float64 copy (a loss; ``value`` is untouched)."""
        if not self.distributed:
            return value
        return self.sum_(value.detach().to(self.device, torch.float64, copy=True).reshape(1))[0]


_WORLD = [World()]


def world() -> World:
    """The current process's world (one process unless :func:`init_from_env` joined one)."""
    return _WORLD[0]


def init_from_env(device: torch.device) -> tuple[World, torch.device]:
    """Join torchrun's process group if this process was started by torchrun
    with more than one process; returns the world and the device this rank
    trains on (CUDA: GPU ``LOCAL_RANK``). Ranks other than 0 print nothing to
    stdout from here on (errors still go to stderr)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return world(), device
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", str(size)))
    if device.type == "cuda":
        if device.index is not None and device.index != local:
            raise ConfigError(f"--device {device}: under torchrun each process takes GPU LOCAL_RANK "
                              f"({local} here); use --device cuda or auto")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend)
    _WORLD[0] = World(rank, size, local, local_size, backend, str(device) if backend == "nccl" else "cpu")
    if rank != 0:
        sys.stdout = open(os.devnull, "w")  # for the rest of the process
    return _WORLD[0], device


def shutdown(finished: bool = False) -> None:
    """Leave the process group (the end of a torchrun job's command).
    ``finished``: every rank got here through the normal end of the command,
    so they first meet at a barrier; without it a rank that left first could
    close its gloo connections while another rank's gloo threads were still
    at work, and that rank aborted at exit ("terminate called without an
    active exception": once in CI's two-process test, 2026-11-25). After
    an error the other ranks may never arrive, so no barrier then."""
    if dist.is_available() and dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()
    _WORLD[0] = World()


def allreduce_grads(params: Iterable[nn.Parameter], w: World, bucket_bytes: int = BUCKET_BYTES) -> None:
    """Sum the parameters' gradients over the ranks, in buckets of about
    ``bucket_bytes`` (one all-reduce each, gradients of one dtype per bucket).
    Every rank must hold gradients for the same parameters. Nothing in one process."""
    if not w.distributed:
        return
    grads = [p.grad for p in params if p.grad is not None]
    buckets: dict[torch.dtype, list[list[torch.Tensor]]] = {}
    for g in grads:
        per = buckets.setdefault(g.dtype, [[]])
        if per[-1] and sum(t.numel() * t.element_size() for t in per[-1]) >= bucket_bytes:
            per.append([])
        per[-1].append(g)
    for bucket in (b for per in buckets.values() for b in per):
        flat = torch.cat([g.reshape(-1) for g in bucket])  # reshape copies a channels_last grad
        dist.all_reduce(flat)
        offset = 0
        for g in bucket:
            g.copy_(flat[offset:offset + g.numel()].view(g.shape))
            offset += g.numel()


def average_bn_statistics(module: nn.Module, w: World) -> None:
    """Average every BatchNorm's running mean and variance over the ranks (so
    that every rank evaluates the same model). Nothing in one process."""
    if not w.distributed:
        return
    stats = [t for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
             for t in (m.running_mean, m.running_var) if t is not None]
    if not stats:
        return
    flat = torch.cat([t.reshape(-1).float() for t in stats]).to(w.device)
    dist.all_reduce(flat)
    flat /= w.size
    offset = 0
    for t in stats:
        t.copy_(flat[offset:offset + t.numel()].view(t.shape))
        offset += t.numel()


class SyncBatchNorm(nn.BatchNorm2d):
    """BatchNorm whose training statistics are the global batch's, for the
    CPU (torch's SyncBatchNorm runs on GPUs only). The mean and the variance
    (two passes, in fp32) come from all-reduced sums; their all-reduce is
    differentiable (torch.distributed.nn), so the backward sums the gradients
    of the statistics over the ranks as one process's BatchNorm would. The
    running variance is unbiased over the global batch. Outside training or
    of a process group it is nn.BatchNorm2d."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_available() and dist.is_initialized()
                and dist.get_world_size() > 1):
            return super().forward(x)
        from torch.distributed.nn.functional import all_reduce

        c, xf = x.shape[1], x.float()
        count = torch.full((1,), float(x.numel() // c), device=x.device)
        sums = all_reduce(torch.cat([xf.sum((0, 2, 3)), count]))
        n = sums[c]
        mean = sums[:c] / n
        centred = xf - mean[None, :, None, None]
        var = all_reduce((centred * centred).sum((0, 2, 3))) / n
        if self.track_running_stats:
            with torch.no_grad():
                m = self.momentum if self.momentum is not None else 0.1
                self.running_mean.lerp_(mean.detach(), m)
                self.running_var.lerp_(var.detach() * n / (n - 1).clamp(min=1), m)
                self.num_batches_tracked.add_(1)
        scale = self.weight * torch.rsqrt(var + self.eps)
        return (centred * scale[None, :, None, None] + self.bias[None, :, None, None]).to(x.dtype)


def convert_sync_batchnorm(module: nn.Module, device: torch.device) -> nn.Module:
    """``module`` with every BatchNorm2d synchronised over the ranks: torch's
    SyncBatchNorm on CUDA, :class:`SyncBatchNorm` elsewhere (weights, biases
    and running statistics carried over)."""
    if device.type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(module)
    for name, child in module.named_children():
        if type(child) is nn.BatchNorm2d:
            new = SyncBatchNorm(child.num_features, child.eps, child.momentum, child.affine,
                                child.track_running_stats)
            new.load_state_dict(child.state_dict())
            setattr(module, name, new.to(child.weight.device))
        else:
            convert_sync_batchnorm(child, device)
    return module
