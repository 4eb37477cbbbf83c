"""Which path a call of one of our fused ops takes: its registered custom ops,
or the same kernels launched straight from a plain autograd Function.

Our ops are ``torch.library`` custom ops so that torch.compile can trace
them, profiler traces carry their names and FlopCounterMode (the roofline)
can cost them. That registration has a price on every eager call: the
dispatcher's trip through Python (schema defaults, autograd key, redispatch)
costs about 20 us a call on the CPU, against 2 us for the plain function.
A small GPU kernel runs in less (bn_act at the recipe's smallest shape: the
H200 measured ours host-bound, docs/PERFORMANCE.md). So an eager call with
nobody looking (no compile, no profiler, no dispatch mode) launches the same
kernel code from a plain autograd Function, and every other call goes
through the custom ops. Both paths call one implementation per kernel; the
tests run both and compare them bit for bit.

``DAWNBENCH_OP_PATH=custom`` forces the custom ops everywhere (to measure
the difference: tools/gpu_suite/ops.py times both).
"""

from __future__ import annotations

import os

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

ENV = "DAWNBENCH_OP_PATH"
PATHS = ("auto", "custom")


def forced_custom() -> bool:
    """Is the custom-op path forced (``DAWNBENCH_OP_PATH=custom``)? An unknown
    value is an error that names the variable, never a silent default."""
    value = os.environ.get(ENV, "auto") or "auto"
    if value not in PATHS:
        raise ValueError(f"{ENV}={value!r}: expected one of {', '.join(PATHS)} (unset means auto)")
    return value == "custom"


def plain_eager() -> bool:
    """May this call skip the custom-op registration? True in eager mode when
    no profiler records, no dispatch mode (FlopCounterMode, fake tensors)
    intercepts and torch.compile is not tracing."""
    return not (torch.compiler.is_compiling() or torch.autograd.profiler._is_profiler_enabled
                or _get_current_dispatch_mode() is not None or forced_custom())
