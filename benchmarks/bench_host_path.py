"""Host time of the Triton faces' eager calls, on the CPU, with every kernel
launch skipped: the Python and torch work around the launches (allocations,
tile choices, autograd, the batch-norm bookkeeping) that an eager call pays
before any kernel runs. On the H100 bn_act's Triton face cost its host 969 us
a forward + backward against 198 us for torch's (docs/results/gpu-h100-2026-11-26b),
with 196 us of kernels: the host is the eager bound.

    python benchmarks/bench_host_path.py [--calls 2000] [--rounds 5]

Prints, per op, the median over rounds of the microseconds a forward +
backward (tiny tensors, bf16 storage, channels_last) and, beside it, torch's
reference face on the same tensors (its CPU kernels run: an upper bound of
its host time). No GPU and no Triton interpreter needed: Triton's launches
are the part left out (benchmarks/gpu_suite_ops.py's host costs time them on a
GPU). Compare two commits by running this from each, interleaved.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_suite_ops import launches_skipped  # noqa: E402

from dawnbench_fast import dispatch  # noqa: E402


def _us(fn: Callable[[], object], calls: int) -> float:
    for _ in range(min(200, calls)):
        fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def cases() -> dict[str, tuple[Callable[[str], Callable[[], object]], tuple]]:
    """op -> (make(face) -> one forward + backward, the modules whose kernels are skipped)."""
    from dawnbench_fast.kernels import bn_act as tk_bn_act
    from dawnbench_fast.kernels import conv_group as tk_conv_group
    from dawnbench_fast.models.layers import BatchNorm, ConvGroup

    x = torch.randn(4, 64, 4, 4).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    x.requires_grad_(True)
    g = torch.randn_like(x)
    bn = BatchNorm(64)

    def bn_act(face: str) -> Callable[[], object]:
        fn = dispatch.get_op("bn_act", face)
        return lambda: fn(x, bn, "silu").backward(g)

    group = ConvGroup(64, 64, act="silu").to(memory_format=torch.channels_last)
    gx = torch.randn(4, 64, 8, 8).to(memory_format=torch.channels_last).requires_grad_(True)
    gg = torch.randn(4, 64, 4, 4).to(memory_format=torch.channels_last)

    def conv_group(face: str) -> Callable[[], object]:
        fn = dispatch.get_op("conv_group", face)
        return lambda: fn(group, gx).backward(gg)

    return {"bn_act": (bn_act, (tk_bn_act,)), "conv_group": (conv_group, (tk_conv_group, tk_bn_act))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000, help="calls a round (default 2000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; the median is printed (default 5)")
    args = ap.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        print("bench_host_path: --calls and --rounds must be at least 1", file=sys.stderr)
        return 2
    print(f"{'op':12} {'triton face, launches skipped (us)':>36} {'torch face (us)':>16}")
    for op, (make, modules) in cases().items():
        ours, ref = [], []
        for _ in range(args.rounds):  # interleaved, so drift hits both alike
            with launches_skipped(*modules):
                ours.append(_us(make("triton"), args.calls))
            ref.append(_us(make("torch"), args.calls))
        print(f"{op:12} {statistics.median(ours):36.1f} {statistics.median(ref):16.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
