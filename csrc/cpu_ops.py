"""The ``cpu`` backend's share of csrc: the CPU (OpenMP) build of the shared
CUDA C++ math, registered only for the ops where benchmarks/bench_csrc_cpu.py
measured it at least as fast as the existing CPU path on this machine class
(docs/PERFORMANCE.md, "CUDA C++ kernels and their CPU build"):

- ``bn_act``: faster than torch's BatchNorm + activation (oneDNN/ATen);
- ``augment``: faster than the numba kernel of data/augment_cpu.py (and
  bit-identical to it and to the reference).

The tensor-core GEMM's CPU build is an emulation for tests, never registered.
If the C++ module cannot be loaded or built, nothing is registered here and
the ``cpu`` backend keeps its other implementations (``REASON`` says why).
"""

from __future__ import annotations

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import native

REASON: str | None = native.unavailable_reason()

if REASON is None:
    from dawnbench_fast.csrc import ops

    dispatch.register("bn_act", "cpu")(ops.bn_act)
    dispatch.register("augment", "cpu")(ops.augment)
