"""Roofline analysis, imported as ``dawnbench_fast.roofline``.

How far is a training step, or a kernel, from the device's peak, and is it
bound by memory or by arithmetic? FLOPs and minimal DRAM bytes are counted
from a PyTorch profiler trace's op names and input shapes (forward and
backward), measured bytes come from Nsight Compute CSVs, and peaks from a
GPU table or this CPU's microbenchmark. See docs/ROOFLINE.md.

- ``capture()`` / ``profile_training(...)``: the live API (:mod:`live`)
- ``build_report(trace, ...)``: count a saved trace (:mod:`report`)
- ``registry.register_cost(op, fn)``, ``registry.register_flop_formulas(table)``:
  formulas for custom ops (:mod:`registry`)
"""

from __future__ import annotations

from dawnbench_fast.roofline.capture import Capture
from dawnbench_fast.roofline.live import capture, profile_training
from dawnbench_fast.roofline.registry import count, register_cost
from dawnbench_fast.roofline.report import Report, build_report

__all__ = ["Capture", "Report", "build_report", "capture", "count", "profile_training",
           "register_cost"]
