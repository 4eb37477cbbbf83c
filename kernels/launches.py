"""Launch bookkeeping shared by every kernel module.

``launch_counts`` counts kernel launches per kernel name so that tests can
assert that the Triton path really ran (no silent fallback to the reference).
"""

from __future__ import annotations

import os
from collections import Counter

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
