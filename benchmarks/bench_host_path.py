"""Host time of the Triton faces' eager calls, on the CPU, with every kernel
launch skipped, under pytest-benchmark: the Python and torch work around the
launches (allocations, tile choices, autograd, the batch-norm bookkeeping)
that an eager call pays before any kernel runs. On the H100 bn_act's Triton
face cost its host 969 us a forward + backward against 198 us for torch's
(docs/results/gpu-h100-2026-11-26b), with 196 us of kernels: there the host
is the eager bound.

    python -m pytest benchmarks/bench_host_path.py --benchmark-only

One group per op (bn_act; the conv group), each with two rows: ``triton``
(our face, every ``*_kernel`` of its modules replaced by a no-op launch,
tools/gpu_suite/ops.py ``launches_skipped``) and ``torch`` (the
reference face on the same tiny tensors, its CPU kernels included: an upper
bound of its host time). One round is ``BENCH_CALLS`` forward + backward calls
(default 200); ``BENCH_ROUNDS`` rounds (default 5). No GPU or Triton interpreter is needed:
Triton's launches are the part left out (the suite's ``host_us`` times them
on a GPU).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
import torch
from knobs import env_int

from dawnbench_fast import dispatch
from tools.gpu_suite.ops import launches_skipped

ROUNDS = env_int("BENCH_ROUNDS", 5)
CALLS = env_int("BENCH_CALLS", 200)  # calls a round: a call is tens to hundreds of microseconds


def _bn_act() -> tuple[Callable[[str], Callable[[], object]], tuple]:
    from dawnbench_fast.kernels import bn_act as tk
    from dawnbench_fast.models.layers import BatchNorm

    x = torch.randn(4, 64, 4, 4).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    x.requires_grad_(True)
    g, bn = torch.randn_like(x), BatchNorm(64)

    def make(face: str) -> Callable[[], object]:
        fn = dispatch.get_op("bn_act", face)
        return lambda: fn(x, bn, "silu").backward(g)

    return make, (tk,)


def _conv_group() -> tuple[Callable[[str], Callable[[], object]], tuple]:
    from dawnbench_fast.kernels import bn_act, conv_group
    from dawnbench_fast.models.layers import ConvGroup

    group = ConvGroup(64, 64, act="silu").to(memory_format=torch.channels_last)
    x = torch.randn(4, 64, 8, 8).to(memory_format=torch.channels_last).requires_grad_(True)
    g = torch.randn(4, 64, 4, 4).to(memory_format=torch.channels_last)

    def make(face: str) -> Callable[[], object]:
        fn = dispatch.get_op("conv_group", face)
        return lambda: fn(group, x).backward(g)

    return make, (conv_group, bn_act)


CASES = {"bn_act": _bn_act, "conv_group": _conv_group}


@pytest.mark.parametrize("face", ["triton", "torch"])
@pytest.mark.parametrize("op", list(CASES))
def test_host_path(benchmark, op: str, face: str):
    make, modules = CASES[op]()
    skipped = launches_skipped(*modules) if face == "triton" else contextlib.nullcontext()
    with skipped:
        call = make(face)

        def calls() -> None:
            for _ in range(CALLS):
                call()

        benchmark.group = f"host path: {op} fwd+bwd x{CALLS}"
        benchmark.pedantic(calls, rounds=ROUNDS, iterations=1, warmup_rounds=1)
        benchmark.extra_info["us_per_call"] = benchmark.stats.stats.median / CALLS * 1e6
    assert benchmark.extra_info["us_per_call"] > 0
