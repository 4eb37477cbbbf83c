"""Where the tests find CIFAR-10: $DAWNBENCH_DATA (CI sets it), else the
shared copy beside the checkout. Loaded once per pytest run."""

from __future__ import annotations

import functools
from pathlib import Path

from dawnbench_fast.data.cifar10 import Cifar10, load_cifar10
from support.shared_data import dataset_dir


def cifar_dir() -> Path:
    return dataset_dir("DAWNBENCH_DATA", "cifar10", "data_batch_1.bin", "CIFAR-10 binary files")


@functools.lru_cache(maxsize=1)
def _load(path: str) -> Cifar10:
    return load_cifar10(path, allow_download=False)


def cifar() -> Cifar10:
    return _load(str(cifar_dir()))
