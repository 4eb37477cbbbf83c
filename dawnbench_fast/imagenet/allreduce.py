"""The gradient all-reduce of a data-parallel step, as a model that can be
checked by hand: how many bytes each step sends, how long a ring
all-reduce of them takes at a stated bus bandwidth, and how much of that
time the backward pass hides, as DDP overlaps it bucket by bucket.

**The ring.** A ring all-reduce of S bytes over N ranks moves
2 (N - 1) / N x S bytes through each rank's link, in 2 (N - 1) steps
(reduce-scatter, then all-gather), so

    time(S) = 2 (N - 1) x latency + 2 (N - 1) / N x S / bus_bandwidth.

"Bus bandwidth" is NCCL's name for exactly this quantity (nccl-tests'
PERFORMANCE.md: busbw = algbw x 2 (n - 1) / n for all-reduce), so a figure
measured with nccl-tests goes in unchanged. One rank sends nothing.

**The buckets.** DDP all-reduces gradients in buckets while the backward
runs. After its first step it rebuilds them in the order the gradients
arrived, the reverse of the forward as a rule: the first bucket closes once
it holds 1 MiB (torch's ``_DEFAULT_FIRST_BUCKET_BYTES``), the others at
25 MiB (``bucket_cap_mb=25``); a bucket closes after the parameter that
reaches its cap, so it may exceed it. The gradients are all-reduced in the
parameters' dtype: fp32 under autocast (the weights stay fp32), unless a
comm hook compresses them.

**The overlap** (an assumption, stated): the backward takes
``backward_share`` of the step's compute time (2/3: a backward costs about
twice the forward's FLOPs) and produces gradient bytes at an even rate, so
bucket k is ready when the bytes up to its end are; buckets are reduced one
after another on one stream. What runs past the end of the backward is
exposed: the step takes compute + exposed.

**Measured** (:func:`time_ring`, :func:`fit_ring`: ``torchrun ... -m
dawnbench_fast.imagenet measure --allreduce``): the all-reduce's median
time at a few sizes over the job's process group, and the bus bandwidth
and latency per hop that the ring's formula fits to them.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn

MIB = 1024 * 1024
FIRST_BUCKET_BYTES = 1 * MIB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
BUCKET_CAP_BYTES = 25 * MIB  # DistributedDataParallel(bucket_cap_mb=25), the default
BACKWARD_SHARE = 2 / 3  # assumed: backward ~ 2x the forward's FLOPs


def ring_seconds(nbytes: float, ranks: int, bus_bytes_per_s: float, latency_s: float = 0.0) -> float:
    """One ring all-reduce of ``nbytes`` over ``ranks`` ranks (0 for one rank)."""
    if ranks <= 1:
        return 0.0
    hops = 2 * (ranks - 1)
    return hops * latency_s + hops / ranks * nbytes / bus_bytes_per_s


def bucket_bytes(param_bytes: list[int], first_cap: int = FIRST_BUCKET_BYTES,
                 cap: int = BUCKET_CAP_BYTES) -> list[int]:
    """The buckets' sizes, in the order they are reduced, from the
    parameters' gradient sizes in the order the backward produces them."""
    out, current = [], 0
    for b in param_bytes:
        current += b
        if current >= (first_cap if not out else cap):
            out.append(current)
            current = 0
    if current:
        out.append(current)
    return out


def even_buckets(total: int, first_cap: int = FIRST_BUCKET_BYTES, cap: int = BUCKET_CAP_BYTES) -> list[int]:
    """``total`` gradient bytes in DDP's buckets when no parameter list is
    given: the first at ``first_cap``, then ``cap`` each, the rest last (as
    if the parameters were small)."""
    out = [min(total, first_cap)]
    left = total - out[0]
    out += [cap] * (left // cap)
    return out + ([left % cap] if left % cap else [])


def gradient_bytes(net: nn.Module) -> list[int]:
    """Each trainable parameter's gradient bytes (its own dtype), last
    parameter first: the order the backward produces them."""
    return [p.numel() * p.element_size() for p in reversed(list(net.parameters())) if p.requires_grad]


@dataclass
class Overlap:
    """One step's all-reduce against its compute."""

    ranks: int
    total_bytes: int
    buckets: int
    comm_s: float  # every bucket's ring time, summed
    exposed_s: float  # the part that runs after the backward ends

    def record(self) -> dict:
        return {"ranks": self.ranks, "gradient_bytes": self.total_bytes, "buckets": self.buckets,
                "allreduce_s": self.comm_s, "exposed_s": self.exposed_s}


def overlap(buckets: list[int], compute_s: float, ranks: int, bus_bytes_per_s: float,
            latency_s: float = 0.0, backward_share: float = BACKWARD_SHARE) -> Overlap:
    """The buckets reduced one after another, each starting when it is ready
    (its bytes produced by the backward, at an even rate) and the previous
    one is done; ``exposed_s`` is how far the last one ends past the backward."""
    total = sum(buckets)
    backward_start = compute_s * (1 - backward_share)
    backward_s = compute_s * backward_share
    done, produced, comm = backward_start, 0, 0.0
    for b in buckets:
        produced += b
        ready = backward_start + backward_s * produced / max(total, 1)
        took = ring_seconds(b, ranks, bus_bytes_per_s, latency_s)
        done = max(done, ready) + took
        comm += took
    exposed = max(0.0, done - compute_s) if ranks > 1 else 0.0
    return Overlap(ranks, total, len(buckets), comm, exposed)


def time_ring(sizes: list[int], device: torch.device, repeats: int = 10) -> list[tuple[int, float]]:
    """(bytes, median seconds) of an fp32 all-reduce of each of ``sizes``
    over the current process group, after three untimed ones; every rank
    calls it, each timing starts at a barrier."""
    import torch.distributed as dist

    out = []
    for nbytes in sizes:
        t = torch.ones(max(1, nbytes // 4), device=device)
        for _ in range(3):
            dist.all_reduce(t)
        times = []
        for _ in range(repeats):
            dist.barrier()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            dist.all_reduce(t)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - start)
        out.append((t.numel() * 4, statistics.median(times)))
    return out


def fit_ring(points: list[tuple[int, float]], ranks: int) -> tuple[float, float]:
    """(bus bytes/s, latency s per hop) of the ring's formula fitted to
    (bytes, seconds) points: t = a + b x S with a = 2 (N - 1) x latency and
    b = 2 (N - 1) / N / bus bandwidth, by least squares on the relative
    error (weights 1/t^2), so that a 4 KiB point weighs as much as a 25 MiB one."""
    if ranks < 2 or len(points) < 2:
        raise ValueError("fit_ring: needs 2 or more ranks and 2 or more sizes")
    w = [1 / p[1] ** 2 for p in points]
    sw = sum(w)
    mx = sum(wi * p[0] for wi, p in zip(w, points, strict=True)) / sw
    my = sum(wi * p[1] for wi, p in zip(w, points, strict=True)) / sw
    b = sum(wi * (p[0] - mx) * (p[1] - my) for wi, p in zip(w, points, strict=True)) / \
        sum(wi * (p[0] - mx) ** 2 for wi, p in zip(w, points, strict=True))
    a = my - b * mx
    hops = 2 * (ranks - 1)
    return hops / ranks / b, max(0.0, a / hops)
