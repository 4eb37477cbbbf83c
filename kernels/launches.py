"""Launch bookkeeping shared by every kernel module.

``launch_counts`` counts kernel launches per kernel name so that tests can
assert that the Triton path really ran (no silent fallback to the reference).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import torch

launch_counts: Counter[str] = Counter()


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def record(name: str) -> None:
    """Count one launch of the kernel ``name``."""
    launch_counts[name] += 1


def needs_f32_math(dtype: torch.dtype) -> bool:
    """The interpreter has no bf16 arithmetic: bf16 tiles are widened to fp32
    before any arithmetic (and before tl.dot) when interpreting. On a GPU bf16
    feeds the tensor cores directly."""
    return dtype == torch.bfloat16 and interpreting()


_poison = False


def new_output(shape, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """Allocate a kernel output. Under :func:`poisoned_outputs` it is filled
    with NaN (floats) or 77 (integers) so that tests catch any element a
    kernel forgets to write."""
    t = torch.empty(shape, dtype=dtype, device=device)
    if _poison:
        t.fill_(float("nan") if dtype.is_floating_point else 77)
    return t


@contextmanager
def poisoned_outputs() -> Iterator[None]:
    """Test helper: every kernel output allocated inside is pre-poisoned."""
    global _poison
    old, _poison = _poison, True
    try:
        yield
    finally:
        _poison = old
