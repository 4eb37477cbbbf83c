"""The benchmarks' settings, read from the environment so that the command
line stays pytest's own (``-k``, ``--benchmark-*``), and where they find
CIFAR-10. docs/PERFORMANCE.md, "How to run, save and compare the benchmarks",
lists them; each benchmark file says which it reads and its defaults.

- ``BENCH_BATCH``: images per batch (default per file: the size its recorded
  figures used);
- ``BENCH_ROUNDS``: timed rounds per case (after the warm-up);
- ``BENCH_IMAGES``, ``BENCH_AUG_BATCH``, ``BENCH_ARMS``: file-specific;
- ``DAWNBENCH_DATA``: the CIFAR-10 folder, else the project's shared copy
  beside the checkout (a benchmark may assume that layout; the package never
  does). Benchmarks that need the data skip without it.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DAWNBENCH_DATA") or REPO.parent / "shared" / "data" / "cifar10")


def env_int(name: str, default: int) -> int:
    """An integer setting (``default`` when unset or empty)."""
    return int(os.environ.get(name) or default)


def env_ints(name: str, default: str) -> list[int]:
    """A comma-separated list of integers, e.g. ``BENCH_AUG_BATCH=2000,10000``."""
    return [int(v) for v in (os.environ.get(name) or default).split(",") if v]


def env_words(name: str, default: str) -> list[str]:
    """A whitespace-separated list, e.g. ``BENCH_ARMS="dawnbench_fast hiverge:act=gelu"``
    (commas belong to the words: an arm's ``--set`` fields)."""
    return (os.environ.get(name) or default).split()


def has_cifar10(path: Path = DATA) -> bool:
    """Whether ``path`` holds CIFAR-10 in either layout the package reads."""
    return (path / "data_batch_1.bin").exists() or (path / "cifar-10-batches-py").is_dir()
