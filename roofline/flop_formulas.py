"""The bridge from our cost formulas to ``torch.utils.flop_counter``: one
formula, two counters.

A cost formula reads the argument lists a profiler trace records. For
FlopCounterMode the actual call's arguments are turned into the same lists,
so that both tools count the FLOPs of one formula. One deliberate difference:
the profiler records a ``str`` argument (an activation name) as ``""`` (a
formula then assumes GELU); here the string itself is passed, so a live count
knows the activation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from dawnbench_fast.roofline.trace_args import TORCH_DTYPE_NAMES, CostFn, call_formula

TraceArgs = tuple[list[Any], list[str], list[str]]


def _one(value: Any) -> tuple[Any, str, str]:
    """(dims, type, concrete) of one argument, as the profiler writes them."""
    if isinstance(value, torch.Tensor):
        return list(value.shape), TORCH_DTYPE_NAMES.get(str(value.dtype), str(value.dtype)), ""
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return [list(v.shape) for v in value], "TensorList", ""
    if isinstance(value, bool | int | float):
        return [], "Scalar", str(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, bool | int | float) for v in value):
        return [], "ScalarList", "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, str):
        return [], "", value  # the profiler records "" here; see the module docstring
    if isinstance(value, torch.dtype):
        return [], "Scalar", str(value)
    return [], "", ""  # None and anything else the trace does not describe


def trace_style_args(schema: torch.FunctionSchema, args: Sequence[Any], kwargs: dict[str, Any]) -> TraceArgs:
    """The (dims, types, concrete) lists of one call, one entry per argument
    of ``schema`` (positional, then keyword, then the schema's defaults)."""
    dims: list[Any] = []
    types: list[str] = []
    concrete: list[str] = []
    for i, arg in enumerate(schema.arguments):
        if i < len(args):
            value = args[i]
        elif arg.name in kwargs:
            value = kwargs[arg.name]
        else:
            value = arg.default_value if arg.has_default_value() else None
        d, t, c = _one(value)
        dims.append(d)
        types.append(t)
        concrete.append(c)
    return dims, types, concrete


def flop_formula(packet: torch._ops.OpOverloadPacket, lookup: Callable[[], CostFn]) -> Callable[..., int]:
    """A raw formula for ``register_flop_formula(packet, get_raw=True)``:
    the FLOPs that ``lookup()`` (the op's current cost formula) gives for the
    call's arguments; 0 when the formula cannot tell."""
    schema = packet.default._schema

    def formula(*args: Any, out_val: Any = None, **kwargs: Any) -> int:
        result = call_formula(lookup(), *trace_style_args(schema, args, kwargs))
        return 0 if result is None else int(round(float(result[0])))

    return formula


def op_packet(op_name: str) -> torch._ops.OpOverloadPacket | None:
    """``torch.ops.<ns>.<name>`` for ``"<ns>::<name>"``, None if not defined."""
    ns, _, name = op_name.partition("::")
    try:
        packet = getattr(getattr(torch.ops, ns), name)
    except (AttributeError, RuntimeError):
        return None
    return packet if isinstance(packet, torch._ops.OpOverloadPacket) else None
