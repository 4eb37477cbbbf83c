"""Fixtures the benchmarks share: the trainer's process set-up, CIFAR-10
(skipped without it) and the C++ build (skipped without it). Run a file with ``python -m pytest
benchmarks/<file>``; the normal test run (``python -m pytest``, testpaths =
tests) never collects this folder."""

from __future__ import annotations

import pytest
from knobs import DATA, has_cifar10


@pytest.fixture(scope="session", autouse=True)
def trainer_allocator():
    """malloc as a training run sets it (runtime.keep_freed_memory: freed memory
    kept for reuse; DAWNBENCH_MALLOC=system opts out), so that what is timed
    here pays the page faults a run pays, no more."""
    from dawnbench_fast.execution.runtime import keep_freed_memory

    keep_freed_memory()


@pytest.fixture(scope="session")
def cifar10():
    """The training and test sets (read once per pytest run), or a skip."""
    if not has_cifar10(DATA):
        pytest.skip(f"CIFAR-10 not found at {DATA}; set DAWNBENCH_DATA")
    from dawnbench_fast.data.cifar10 import load_cifar10

    return load_cifar10(str(DATA), allow_download=False)


@pytest.fixture(scope="session")
def native_build():
    """dawnbench_fast._C (its CPU kernels), or a skip naming why it is missing."""
    from dawnbench_fast.csrc import native

    reason = native.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return native.load()
