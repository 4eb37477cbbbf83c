"""Attribute a trace's time to counted ops and put FLOPs and bytes beside it.

Which op is counted: walking each host op tree from the top, the first op
with a cost formula that determines its cost is a *counted op*; everything
inside it (its dispatcher layers, allocations, the backend kernel op) belongs
to it, so no time or FLOP is counted twice. Exceptions, so that the most
precise op is the one counted:
- an op with a same-named op inside it (autocast re-dispatches ``conv2d``
  after casting its inputs) is opened up: the casts and the inner op are
  counted separately, at their real dtypes;
- an op whose formula cannot tell its cost from the recorded inputs (e.g.
  ``padding="same"`` is recorded as an empty string) is opened up;
- ops that may or may not copy (``contiguous``, ``to``, ``zeros``...) are
  opened up when they have children.
An autograd node (``XBackward0``) without children ran no tensor op and is
counted at zero cost. Any other op without a formula and without children is
*uncounted*: it is listed in
the report by name with its time. An op without a formula that has children
is a *container*: its children are visited. A framework container's self time
(``record_function`` ranges, autograd wrappers, composite aten ops like
``cross_entropy_loss``: Python and dispatch work between the children) is
reported as overhead, apart from op time; any other container (a custom op
without a formula, whose own code may compute) has its self time listed as
uncounted op time.

Time: on a CPU trace, a counted op's time is its duration (inclusive of the
ops inside it). On a trace with GPU activity, it is the summed duration of the
kernels launched by it or by ops inside it; kernels launched by no op, or by a
container's own code, are uncounted and listed by kernel name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dawnbench_fast.roofline import registry
from dawnbench_fast.roofline.cost_memory import DESCEND_IF_PARENT
from dawnbench_fast.roofline.trace import Kernel, Op, Trace


@dataclass
class Unit:
    """One counted (or uncounted) call."""

    op: Op
    counted: bool
    flops: float = 0.0
    bytes: float = 0.0
    time_us: float = 0.0
    matmul_flops: float = 0.0
    kernels: list[Kernel] = field(default_factory=list)


@dataclass
class Attribution:
    units: list[Unit]
    overhead: dict[str, float]  # container name -> self time (us)
    unlinked_kernels: list[Kernel]  # device activity that no counted op launched
    on_gpu: bool
    has_shapes: bool


_STEP_NUMBER = re.compile(r"#\d+$")
_AUTOGRAD_NODE = re.compile(r"^[A-Za-z0-9_]+Backward\d*$")


def display_name(name: str) -> str:
    """Group names that differ only by a step number (``ProfilerStep#7``)."""
    return _STEP_NUMBER.sub("#*", name)


_FRAMEWORK_PREFIXES = ("aten::", "autograd::", "torch::autograd::", "prims::", "ProfilerStep#",
                       "Optimizer.", "enumerate(DataLoader)", "cudaDeviceSynchronize")


def _is_framework(op: Op) -> bool:
    """Containers whose self time is framework work (dispatch, autograd,
    Python between ops), not an op's computation: record_function ranges,
    autograd nodes and wrappers, Python autograd.Functions, and composite aten
    ops (their work is done by the aten ops they call). Only namespaced
    non-aten ops (custom ops such as ``dawnbench::x``) may compute in their
    own code."""
    return (op.annotation or op.name.startswith(_FRAMEWORK_PREFIXES)
            or _AUTOGRAD_NODE.search(op.name) is not None
            # no namespace: a Python autograd.Function's forward (recorded by
            # its class name) or a record_function range, not a dispatcher op
            or "::" not in op.name)


def _has_same_name_descendant(op: Op) -> bool:
    return any(d.name == op.name for c in op.children for d in c.walk())


def attribute(trace: Trace) -> Attribution:
    """Split the trace into counted and uncounted units (see module doc)."""
    units: list[Unit] = []
    overhead: dict[str, float] = {}
    owner: dict[int, Unit] = {}  # id(op) -> unit that owns it

    def visit(op: Op) -> None:
        if registry.has_cost(op.name) and not op.annotation:
            open_up = bool(op.children) and (
                op.name in DESCEND_IF_PARENT or _has_same_name_descendant(op)
            )
            if not open_up:
                result = registry.count_split(op.name, op.shapes, op.dtypes, op.concrete)
                if result is not None:
                    unit = Unit(op, True, result[0], result[1], op.dur, result[2])
                    units.append(unit)
                    for d in op.walk():
                        owner[id(d)] = unit
                    return
        if not op.children and not op.annotation:
            # An autograd node that ran no op (AddBackward0 passes its gradient
            # through) did no tensor work: any would have been recorded as ops.
            counted = _AUTOGRAD_NODE.search(op.name) is not None
            unit = Unit(op, counted, time_us=op.dur)
            units.append(unit)
            owner[id(op)] = unit
            return
        if _is_framework(op):
            name = display_name(op.name)
            overhead[name] = overhead.get(name, 0.0) + op.self_time
        else:
            # an op from another namespace (a custom op) without a formula: its
            # own work between its children is op time that nobody counted
            unit = Unit(op, False, time_us=op.self_time)
            units.append(unit)
            owner[id(op)] = unit
        for c in op.children:
            visit(c)

    for root in trace.roots:
        visit(root)

    unlinked: list[Kernel] = []
    if trace.on_gpu:
        for u in units:
            u.time_us = 0.0
        for k in trace.kernels:
            unit = owner.get(id(k.op)) if k.op is not None else None
            if unit is None:
                unlinked.append(k)
                continue
            unit.kernels.append(k)
            unit.time_us += k.dur
    return Attribution(units, overhead, unlinked, trace.on_gpu, trace.has_shapes)
