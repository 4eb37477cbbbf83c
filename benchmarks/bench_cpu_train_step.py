"""CPU training-step throughput of the CIFAR recipe: the plain PyTorch
reference ops (``--kernels torch``) against our CPU path (``--kernels cpu``:
csrc's C++ kernels + oneDNN convolutions), each weight-gradient method
alone on every conv shape of the net (skipped where this CPU lacks what it
needs), and the data preparation the clock's init charges.

    python -m pytest benchmarks/bench_cpu_train_step.py --benchmark-only \
        --benchmark-columns=mean,stddev,rounds [--benchmark-autosave]

``BENCH_BATCH`` images per step (default 1000), ``BENCH_ROUNDS`` timed
rounds (default 3). The training steps need CIFAR-10 (``DAWNBENCH_DATA``;
skipped without it). Run it on an otherwise idle machine: on 2 cores
anything else distorts it.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from knobs import env_int

from dawnbench_fast import dispatch
from dawnbench_fast.cifar import CifarTask, Config
from dawnbench_fast.config.precision import with_resolved_precision
from dawnbench_fast.csrc import conv_group
from dawnbench_fast.data.cifar10_device import place_data, prepare_data

BATCH = env_int("BENCH_BATCH", 1000)
ROUNDS = env_int("BENCH_ROUNDS", 3)


@pytest.fixture(scope="module")
def data(cifar10):
    # the 32-px step (the recipe's first epochs train smaller: progressive)
    cfg = dataclasses.replace(Config(), subset=BATCH * 3, batch_size=BATCH, progressive=(),
                              whiten_images=min(BATCH * 3, Config().whiten_images))
    cfg, _ = with_resolved_precision(cfg, torch.device("cpu"))  # auto made concrete, as a run does
    return cfg, prepare_data(cifar10, cfg, torch.device("cpu"))


@pytest.mark.parametrize("backend", ["torch", "cpu"])
def test_train_step(benchmark, data, backend):
    if (reason := dispatch.unavailable_reason(backend, torch.device("cpu"))) is not None:
        pytest.skip(f"--kernels {backend} unavailable here: {reason}")
    cfg, d = data
    t = CifarTask(dataclasses.replace(cfg, kernels=backend), d, torch.device("cpu"), backend)
    t.init_model()
    batches = list(t.epoch_batches(0))
    for b in batches[:2]:  # warm-up: oneDNN primitives, allocator growth
        t.train_step(*b)
    benchmark.group = f"training step, batch {BATCH}"
    benchmark.pedantic(lambda: t.train_step(*batches[2]), rounds=ROUNDS, iterations=1)
    benchmark.extra_info["images_per_s"] = BATCH / benchmark.stats.stats.mean
    benchmark.extra_info["threads"] = torch.get_num_threads()
    benchmark.extra_info["precision"] = cfg.precision


def test_data_prepare(benchmark, cifar10):
    """What the clock's init charges for the data: the whole training set
    reflect-padded and the test and whitening images normalised (DeviceData.prepare)."""
    cfg, _ = with_resolved_precision(Config(), torch.device("cpu"))
    d = place_data(cifar10, cfg, torch.device("cpu"))
    d.prepare()  # warm-up: first-touch pages
    benchmark.group = "data preparation on the clock (full CIFAR-10)"
    benchmark.pedantic(d.prepare, rounds=ROUNDS, iterations=1)
    benchmark.extra_info["threads"] = torch.get_num_threads()
    benchmark.extra_info["images"] = {"train": len(d.train_u8), "test": len(d.test_u8),
                                      "whiten": cfg.whiten_images}


SHAPES = [(24, 64, 31), (64, 64, 15), (64, 256, 15), (256, 256, 7), (256, 256, 3)]


@pytest.mark.parametrize("cin,cout,hw", SHAPES)
@pytest.mark.parametrize("method", conv_group.WGRAD_METHODS)
def test_conv_weight_gradient(benchmark, cin, cout, hw, method):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, cin, hw, hw, generator=gen).bfloat16().to(memory_format=torch.channels_last)
    g = torch.randn(BATCH, cout, hw, hw, generator=gen).bfloat16().to(memory_format=torch.channels_last)
    w = torch.randn(cout, cin, 3, 3, generator=gen).bfloat16().to(memory_format=torch.channels_last)
    if method not in conv_group.applicable_methods(x, w):  # our kernels need AVX-512 BF16 or AMX tiles
        pytest.skip(f"weight-gradient method {method} unavailable here: this CPU (or the C++ build) lacks "
                    f"what it needs")
    fn = conv_group._METHODS[method]
    fn(x, g, w)
    benchmark.group = f"conv weight gradient {cin}->{cout} @ {hw}, batch {BATCH}, bf16"
    benchmark.pedantic(lambda: fn(x, g, w), rounds=ROUNDS, iterations=1)
    flops = 2 * BATCH * hw * hw * cin * cout * 9
    benchmark.extra_info["gflop_per_s"] = flops / benchmark.stats.stats.mean / 1e9
