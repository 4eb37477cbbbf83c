"""Where the tests find CIFAR-10: $DAWNBENCH_DATA (CI sets it), else the
shared copy beside the checkout. Loaded once per pytest run.

The package reads and checks the batch files (six files, about 180 MB) for
every task a test builds, about a hundred times in the default tier at some
0.6 s each: :func:`read_the_shared_copy_once` (tests/conftest.py) makes the
reader keep the shared copy's arrays, keyed by its files' sizes and times, and
give each caller arrays of its own; a folder of a test's own (a damaged or
converted copy) is read as before."""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

from dawnbench_fast.data import cifar10
from dawnbench_fast.data.cifar10 import Cifar10, load_cifar10
from support.shared_data import SHARED_DATA, dataset_dir


def cifar_dir() -> Path:
    return dataset_dir("DAWNBENCH_DATA", "cifar10", "data_batch_1.bin", "CIFAR-10 binary files")


@functools.lru_cache(maxsize=1)
def _load(path: str) -> Cifar10:
    return load_cifar10(path, allow_download=False)


def cifar() -> Cifar10:
    return _load(str(cifar_dir()))


def _files(folder: Path) -> tuple:
    return tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.iterdir())
                 if p.is_file())


def read_the_shared_copy_once() -> None:
    """Wrap ``cifar10.read_cifar10`` as the module's docstring says (once per process)."""
    read = cifar10.read_cifar10
    if getattr(read, "shares", False):
        return
    shared = Path(os.environ.get("DAWNBENCH_DATA") or SHARED_DATA / "cifar10").resolve()
    kept: dict[tuple, Cifar10] = {}

    def read_once(folder: Path, layout: str) -> Cifar10:
        folder = Path(folder)
        if not folder.resolve().is_relative_to(shared):
            return read(folder, layout)
        key = (str(folder.resolve()), layout, _files(folder))
        if key not in kept:
            kept.clear()
            kept[key] = read(folder, layout)
        d = kept[key]
        return dataclasses.replace(d, train_images=d.train_images.copy(), train_labels=d.train_labels.copy(),
                                   test_images=d.test_images.copy(), test_labels=d.test_labels.copy())

    read_once.shares = True
    cifar10.read_cifar10 = read_once
