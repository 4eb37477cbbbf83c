"""The ``cpu`` backend's probe and its share of csrc: the CPU (OpenMP) build
of the shared CUDA C++ math, registered only for the ops where
benchmarks/bench_csrc_cpu.py measured it at least as fast as the other CPU
paths on this machine class (docs/PERFORMANCE.md, "CUDA C++ kernels and their
CPU build"):

- ``bn_act``: faster than torch's BatchNorm + activation (oneDNN/ATen);
  Its ``pooled`` attribute is the fused max-pool + BN + act
  (csrc/pool_bn_act.py), which the cpu conv group uses after its first conv;
- ``augment``: faster than the numba kernel of data/augment_cpu.py (and
  bit-identical to it and to the reference), which is therefore registered
  nowhere: this module is the one place that says which ``augment`` serves.

``conv_group`` comes from models/conv_cpu.py. The tensor-core GEMM's CPU build
is an emulation for tests, never registered. Without the C++ build
(``dawnbench_fast._C`` neither importable nor buildable) the probe refuses
the backend with a one-line reason: ``--kernels cpu`` means our kernels, and
numba plus the reference in their place would be a silent fallback.
"""

from __future__ import annotations

import torch

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import native, ops, pool_bn_act  # noqa: F401 - gives bn_act .pooled


def probe(device: torch.device) -> str | None:
    """dispatch probe of backend ``cpu``: None if usable, else one line."""
    if device.type != "cpu":
        return f"the cpu kernels run on the CPU, not on {device}; use --device cpu"
    return native.unavailable_reason()  # looked up now, so tests can simulate a missing build


dispatch.register_probe("cpu", probe)
dispatch.register("bn_act", "cpu")(ops.bn_act)
dispatch.register("augment", "cpu")(ops.augment)
