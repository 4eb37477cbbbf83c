"""Where the tests find CIFAR-10: $DAWNBENCH_DATA (CI sets it), else the
shared copy beside the checkout. Loaded once per test session."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

from dawnbench_fast.data.cifar10 import Cifar10, load_cifar10

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10"


def cifar_dir() -> Path:
    path = Path(os.environ.get("DAWNBENCH_DATA") or SHARED)
    if not (path / "data_batch_1.bin").exists():
        pytest.skip(f"CIFAR-10 binary files not found at {path}; set DAWNBENCH_DATA")
    return path


@functools.lru_cache(maxsize=1)
def _load(path: str) -> Cifar10:
    return load_cifar10(path, allow_download=False)


def cifar() -> Cifar10:
    return _load(str(cifar_dir()))
