"""The CPU (OpenMP) build of csrc's kernels against the existing CPU paths, on
this machine, at the CIFAR recipe's shapes (pytest-benchmark; one group per
comparison, so the table sets them side by side).

    python -m pytest benchmarks/bench_csrc_cpu.py [--benchmark-autosave]
    python benchmarks/bench_csrc_cpu.py [--batch 500] [--reps 7] [--json out.json]   # the same

- bn_act: BatchNorm (training) + GELU, forward + backward, at the six BN
  shapes of the CIFAR net (widths 64/256/256, 32 px input): ours
  (``dawnbench::csrc_bn_act_fwd/bwd``) vs the torch reference
  (``nn.BatchNorm2d`` + ``F.gelu``, oneDNN/ATen kernels), bf16 channels_last
  (the recipe's CPU setting) and fp32 NCHW. ``BENCH_BATCH`` (default 500).
- bn_act latency: eval mode, batch 1, the six layers of one image (what the
  DAWNBench 1-image latency runs through); the figure is per image.
- bias_act: act(x + bias[c]) with GELU, forward + backward (gradients of x
  and bias) at the same six shapes and layouts, and forward alone on one
  image (batch 1): ours (``dawnbench::csrc_bias_act`` / ``_bwd``) vs the
  torch reference (``layer_ops.bias_act``): whether the cpu backend serves
  it (csrc/bias_act.py says what this measured).
- augment: crop + flip + normalise of a batch from the padded uint8 dataset:
  ours vs the numba kernel (``data.augment_cpu``) vs the torch reference,
  checked bit-identical before timing. ``BENCH_AUG_BATCH`` (default 2000,10000).

``BENCH_ROUNDS`` timed rounds (default 7) after one warm-up round. Each
case's rounds run back to back (not interleaved with the other
implementation's, as the script before did): on a busy machine compare
within one run and look at the spread. ``extra_info`` holds the load
average before and after each case. Needs the C++ build (skipped without it).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import pytest
import torch
from knobs import env_int, env_ints

from dawnbench_fast.data import augment as A
from dawnbench_fast.models.layers import BatchNorm, bn_act

BATCH = env_int("BENCH_BATCH", 500)
ROUNDS = env_int("BENCH_ROUNDS", 7)
AUG_BATCHES = env_ints("BENCH_AUG_BATCH", "2000,10000")
# (channels, side) of the six BN layers of CifarNet(64, 256, 256) at 32 px.
BN_SHAPES = [(64, 15), (64, 15), (256, 7), (256, 7), (256, 3), (256, 3)]
LATENCY_CALLS = 200  # one-image passes per round: a single pass is ~0.1 ms


def _bn_act_impl(name: str):
    from dawnbench_fast.csrc import bn_act as csrc_bn_act

    return {"torch": bn_act, "csrc": csrc_bn_act.bn_act}[name]


def _timed(benchmark, fn, iterations: int = 1) -> None:
    benchmark.extra_info["loadavg_before"] = os.getloadavg()[0]
    benchmark.pedantic(fn, rounds=ROUNDS, iterations=iterations, warmup_rounds=1)
    benchmark.extra_info.update(loadavg_after=os.getloadavg()[0], threads=torch.get_num_threads())


@pytest.mark.parametrize("impl", ["torch", "csrc"])
@pytest.mark.parametrize("dtype,layout", [(torch.bfloat16, "channels_last"), (torch.float32, "nchw")],
                         ids=["bf16-channels_last", "fp32-nchw"])
def test_bn_act_train(benchmark, native_build, impl, dtype, layout):
    gen = torch.Generator().manual_seed(0)
    layers = []
    for c, side in BN_SHAPES:
        x = (torch.randn(BATCH, c, side, side, generator=gen) + 0.5).to(dtype)
        g = torch.randn(x.shape, generator=gen).to(dtype)
        if layout == "channels_last":
            x, g = (t.contiguous(memory_format=torch.channels_last) for t in (x, g))
        layers.append((x.requires_grad_(), g, BatchNorm(c)))
    fn = _bn_act_impl(impl)

    def step():
        for x, g, bn in layers:
            x.grad = None
            fn(x, bn, "gelu").backward(g)

    dt = str(dtype).removeprefix("torch.")
    benchmark.group = f"bn_act fwd+bwd gelu training, six BN layers, batch {BATCH}, {dt} {layout}"
    _timed(benchmark, step)
    benchmark.extra_info["elements"] = sum(x.numel() for x, _, _ in layers)


@pytest.mark.parametrize("impl", ["torch", "csrc"])
def test_bn_act_latency(benchmark, native_build, impl):
    gen = torch.Generator().manual_seed(0)
    layers = [(torch.randn(1, c, side, side, generator=gen).bfloat16().contiguous(
        memory_format=torch.channels_last), BatchNorm(c).eval()) for c, side in BN_SHAPES]
    fn = _bn_act_impl(impl)

    def one_image():
        with torch.no_grad():
            for x, bn in layers:
                fn(x, bn, "gelu")

    benchmark.group = "bn_act eval, the six layers of one image (latency path), bf16 channels_last"
    _timed(benchmark, one_image, iterations=LATENCY_CALLS)  # the stats are per image


def _bias_act_impl(name: str):
    from dawnbench_fast.csrc import bias_act as csrc_bias_act
    from dawnbench_fast.layer_ops import bias_act

    return {"torch": bias_act, "csrc": csrc_bias_act.bias_act}[name]


@pytest.mark.parametrize("impl", ["torch", "csrc"])
@pytest.mark.parametrize("batch", [BATCH, 1])
@pytest.mark.parametrize("dtype,layout", [(torch.bfloat16, "channels_last"), (torch.float32, "nchw")],
                         ids=["bf16-channels_last", "fp32-nchw"])
def test_bias_act(benchmark, native_build, impl, batch, dtype, layout):
    gen = torch.Generator().manual_seed(0)
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    layers = [tuple((torch.randn(batch, c, side, side, generator=gen) + 0.5).to(dtype).contiguous(
        memory_format=fmt) for _ in range(2)) + (torch.randn(c, generator=gen),) for c, side in BN_SHAPES]
    fn = _bias_act_impl(impl)

    def train_step():
        for x, g, bias in layers:
            fn(x.detach().requires_grad_(), bias.detach().requires_grad_(), "gelu").backward(g)

    def forward():
        with torch.no_grad():
            for x, _, bias in layers:
                fn(x, bias, "gelu")

    dt = str(dtype).removeprefix("torch.")
    what = "fwd+bwd" if batch > 1 else "fwd (no grad)"
    benchmark.group = f"bias_act {what} gelu, six BN shapes, batch {batch}, {dt} {layout}"
    _timed(benchmark, train_step if batch > 1 else forward, iterations=1 if batch > 1 else LATENCY_CALLS)


@pytest.fixture(scope="module")
def augment_inputs():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(50_000, 32, 32, 3), dtype=np.uint8)
    padded = A.pad_reflect(torch.from_numpy(images), 2)
    scale, shift = (torch.from_numpy(a) for a in A.normalisation((0.49, 0.48, 0.45), (0.25, 0.24, 0.26)))
    return padded, scale, shift, rng.permutation(50_000)


@pytest.mark.parametrize("impl", ["torch", "numba", "csrc"])
@pytest.mark.parametrize("batch", AUG_BATCHES)
def test_augment(benchmark, native_build, augment_inputs, impl, batch):
    from dawnbench_fast.csrc import augment as csrc_augment
    from dawnbench_fast.data.augment_cpu import augment_cpu

    padded, scale, shift, order = augment_inputs
    idx = torch.from_numpy(order[:batch])
    p = A.augment_params(0, 1, idx)
    fn = {"torch": A.augment_torch, "numba": augment_cpu, "csrc": csrc_augment.augment}[impl]
    # same result as the reference before it is timed
    assert torch.equal(fn(padded, idx, p, scale, shift), A.augment_torch(padded, idx, p, scale, shift))
    benchmark.group = f"augment translate 2 + flip, fp32 out, batch {batch}"
    _timed(benchmark, lambda: fn(padded, idx, p, scale, shift))
    benchmark.extra_info["images_per_s"] = batch / benchmark.stats.stats.median


def main(argv: list[str] | None = None) -> int:
    import script_entry

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="other arguments go to pytest")
    ap.add_argument("--batch", type=int, help="bn_act batch (BENCH_BATCH)")
    ap.add_argument("--aug-batch", type=int, nargs="+", help="augment batch sizes (BENCH_AUG_BATCH)")
    ap.add_argument("--reps", type=int, help="timed rounds (BENCH_ROUNDS)")
    ap.add_argument("--json", help="also write pytest-benchmark's JSON here")
    args, rest = ap.parse_known_args(argv)
    return script_entry.run(__file__, {"BENCH_BATCH": args.batch, "BENCH_AUG_BATCH": args.aug_batch,
                                       "BENCH_ROUNDS": args.reps}, args.json, pytest_args=rest)


if __name__ == "__main__":
    sys.exit(main())
