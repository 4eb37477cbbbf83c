"""CPU training-step throughput of the CIFAR recipe: the plain PyTorch
reference ops (``--kernels torch``) against our CPU path (``--kernels cpu``:
numba augmentation + shape-tuned conv weight gradients), and each weight-
gradient method alone on every conv shape of the net.

    python -m pytest benchmarks/bench_cpu_train_step.py --benchmark-only \
        --benchmark-columns=mean,stddev,rounds

Run it on an otherwise idle machine: on 2 cores anything else distorts it.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from dawnbench_fast.cifar import Config, Trainer, prepare_data
from dawnbench_fast.data.cifar10 import load_cifar10
from dawnbench_fast.models import conv_cpu
from dawnbench_fast.runtime import keep_freed_memory

BATCH = int(os.environ.get("BENCH_BATCH", "1000"))
DATA = os.environ.get("DAWNBENCH_DATA", os.path.join(os.path.dirname(__file__), "..", "..",
                                                     "shared", "data", "cifar10"))


@pytest.fixture(scope="module")
def data():
    keep_freed_memory()  # as the trainer does (DAWNBENCH_MALLOC=system: malloc's defaults)
    cfg = dataclasses.replace(Config(), subset=BATCH * 3, batch_size=BATCH)
    return cfg, prepare_data(load_cifar10(DATA, allow_download=False), cfg, torch.device("cpu"))


@pytest.mark.parametrize("backend", ["torch", "cpu"])
def test_train_step(benchmark, data, backend):
    cfg, d = data
    t = Trainer(dataclasses.replace(cfg, kernels=backend), d, torch.device("cpu"), backend)
    t.init_model()
    batches = list(t.epoch_batches(0))
    for b in batches[:2]:  # warm-up: oneDNN primitives, wgrad method choice
        t.train_step(*b)
    benchmark.pedantic(lambda: t.train_step(*batches[2]), rounds=3, iterations=1)
    benchmark.extra_info["images_per_s"] = BATCH / benchmark.stats.stats.mean
    benchmark.extra_info["threads"] = torch.get_num_threads()


SHAPES = [(24, 64, 31), (64, 64, 15), (64, 256, 15), (256, 256, 7), (256, 256, 3)]


@pytest.mark.parametrize("cin,cout,hw", SHAPES)
@pytest.mark.parametrize("method", conv_cpu.WGRAD_METHODS)
def test_conv_weight_gradient(benchmark, cin, cout, hw, method):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, cin, hw, hw, generator=gen).bfloat16().to(memory_format=torch.channels_last)
    g = torch.randn(BATCH, cout, hw, hw, generator=gen).bfloat16().to(memory_format=torch.channels_last)
    w = torch.randn(cout, cin, 3, 3, generator=gen).bfloat16().to(memory_format=torch.channels_last)
    fn = conv_cpu._METHODS[method]
    fn(x, g, w)
    benchmark.pedantic(lambda: fn(x, g, w), rounds=3, iterations=1)
    flops = 2 * BATCH * hw * hw * cin * cout * 9
    benchmark.extra_info["gflop_per_s"] = flops / benchmark.stats.stats.mean / 1e9
