"""The cost registry: FLOPs and minimal DRAM bytes of one call of an op, from
the input shapes and dtypes that a PyTorch profiler trace records.

Conventions, used everywhere in the roofline tool:

- FLOP = 2 x multiply-accumulate (a fused multiply-add counts as 2 FLOPs).
- Minimal bytes = every tensor input read once + every output written once,
  at the dtype's size. It is a lower bound on DRAM traffic: caches that miss,
  re-reads and workspace traffic only add to it.

A cost function takes ``(input_shapes, input_dtypes)`` or
``(input_shapes, input_dtypes, concrete_inputs)`` (see :mod:`trace_args`) and
returns ``(flops, bytes)``, or ``None`` when these inputs do not determine
the cost (the analysis then counts the op's children instead).

Where formulas come from, loaded lazily on the first question asked:

1. the ``cost_*`` modules here (aten ops), each holding a :class:`CostTable`;
2. every table named in the ``dawnbench_fast.costs`` entry-point group
   (pyproject.toml): our kernels' custom ops (``dawnbench::*``). The roofline
   names no kernel package: a fresh process (the CLI) finds them through the
   installed metadata, and an install without a backend simply has no entry
   for it;
3. ``register_cost`` / ``register_costs`` / ``register_flop_formulas`` calls.
   The modules that define custom ops call ``register_flop_formulas(COSTS)``,
   which also gives torch's FlopCounterMode the same formulas.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dawnbench_fast.roofline.cost_table import CostTable
from dawnbench_fast.roofline.trace_args import CostFn, call_formula, takes_concrete

ENTRY_POINT_GROUP = "dawnbench_fast.costs"
# The aten formula modules, each with a COSTS table (imported on first use).
BUILTIN_MODULES = ("cost_conv", "cost_matmul", "cost_memory", "cost_norm", "cost_optim",
                   "cost_pointwise", "cost_reduce")

CostTableLike = Mapping[str, tuple[CostFn, bool]]

_REGISTRY: dict[str, tuple[CostFn, bool]] = {}  # name -> (fn, takes concrete inputs)
_MATMUL_OPS: set[str] = set()  # ops whose FLOPs go into the matmul/conv subtotal
_BUILTINS_LOADED = False
_FLOP_FNS: dict[str, CostFn] = {}  # dawnbench:: op -> formula FlopCounterMode calls (latest wins)


def register_cost(op_name: str, fn: CostFn, *, matmul: bool = False) -> CostFn:
    """Register the cost formula of ``op_name`` (the name the profiler records,
    e.g. ``"aten::mm"`` or ``"dawnbench::bn_act"``). ``matmul=True`` puts the
    op's FLOPs into the report's matmul/conv subtotal (for GEMM and convolution
    kernels, fused or not). Returns ``fn``. A later registration replaces an
    earlier one."""
    if not isinstance(op_name, str) or not op_name:
        raise ValueError("register_cost: op_name must be a non-empty string like 'dawnbench::bn_act'")
    if not callable(fn):
        raise TypeError(f"register_cost({op_name!r}, fn): fn is not callable")
    _REGISTRY[op_name] = (fn, takes_concrete(fn))
    if matmul:
        _MATMUL_OPS.add(op_name)
    return fn


def register_costs(table: CostTableLike) -> None:
    """Register a module's formulas at once: ``{op_name: (fn, is_matmul)}``."""
    _register_table(table, replace=True)


def _register_table(table: CostTableLike, *, replace: bool) -> None:
    # replace=False for tables loaded behind the caller's back (built-ins, entry
    # points): an explicit register_cost made earlier in the process wins.
    for name, (fn, is_mm) in table.items():
        if replace or name not in _REGISTRY:
            register_cost(name, fn, matmul=is_mm)
    _MATMUL_OPS.update(getattr(table, "matmul_marks", ()))


def mark_matmul(*op_names: str) -> None:
    """Put these ops' FLOPs into the matmul/conv subtotal."""
    _MATMUL_OPS.update(op_names)


def is_matmul(op_name: str) -> bool:
    """Whether ``op_name``'s FLOPs belong to the matmul/conv subtotal."""
    _load_builtins()
    return op_name in _MATMUL_OPS


def cost(*op_names: str) -> Callable[[CostFn], CostFn]:
    """Decorator form: ``@cost("aten::mm", "aten::matmul")``."""

    def deco(fn: CostFn) -> CostFn:
        for name in op_names:
            register_cost(name, fn)
        return fn

    return deco


def has_cost(op_name: str) -> bool:
    """Whether a formula is registered for ``op_name``."""
    _load_builtins()
    return op_name in _REGISTRY


def registered_ops() -> list[str]:
    """Every op name with a formula, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def count(
    op_name: str,
    shapes: Sequence[Any],
    dtypes: Sequence[str],
    concrete: Sequence[str] | None = None,
) -> tuple[float, float] | None:
    """(FLOPs, minimal bytes) of one call, or None when ``op_name`` has no
    formula or these inputs do not determine its cost."""
    full = count_split(op_name, shapes, dtypes, concrete)
    return None if full is None else (full[0], full[1])


def count_split(
    op_name: str,
    shapes: Sequence[Any],
    dtypes: Sequence[str],
    concrete: Sequence[str] | None = None,
) -> tuple[float, float, float] | None:
    """(FLOPs, minimal bytes, the FLOPs that belong to the matmul/conv
    subtotal). A formula may return a third element for ops that mix both
    (a conv backward's bias gradient is a reduction, not 2 x MAC work);
    otherwise all of a matmul op's FLOPs and none of another op's count."""
    _load_builtins()
    entry = _REGISTRY.get(op_name)
    if entry is None:
        return None
    fn, with_concrete = entry
    result = call_formula(fn, shapes, dtypes, concrete, with_concrete)
    if result is None:
        return None
    flops, nbytes = float(result[0]), float(result[1])
    if len(result) > 2:
        mm = float(result[2])
    else:
        mm = flops if op_name in _MATMUL_OPS else 0.0
    return flops, nbytes, mm


def register_flop_formulas(table: CostTableLike) -> list[str]:
    """Give torch's FlopCounterMode the formulas of a custom-op cost table
    (``{"dawnbench::<name>": (fn, is_matmul)}``), and register the table here.

    Call it after defining the ops: keys whose op does not exist (yet) are
    skipped, and a later call picks them up. Idempotent: an op registered by
    an earlier call keeps its torch registration (torch refuses duplicates)
    and counts with the latest call's formula. Returns the op names newly
    registered with torch."""
    from torch.utils.flop_counter import register_flop_formula

    from dawnbench_fast.roofline.flop_formulas import flop_formula, op_packet

    _register_table(table, replace=False)
    added: list[str] = []
    for name, (fn, _is_mm) in table.items():
        if not name.startswith("dawnbench::"):
            continue
        packet = op_packet(name)
        if packet is None:
            continue
        first = name not in _FLOP_FNS
        _FLOP_FNS[name] = fn
        if first:
            register_flop_formula(packet, get_raw=True)(flop_formula(packet, lambda n=name: _FLOP_FNS[n]))
            added.append(name)
    return added


def _load_builtins() -> None:
    """Register the aten tables and the entry points' tables, once."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    _register_table(_builtin_table(), replace=False)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            table = ep.load()
        except ImportError:
            continue  # that backend is not part of this install
        _register_table(table, replace=False)


def _builtin_table() -> CostTable:
    """The aten tables merged in BUILTIN_MODULES order (a later module's
    formula for the same op wins, as when they registered one by one)."""
    merged = CostTable()
    for mod in BUILTIN_MODULES:
        table = importlib.import_module(f"dawnbench_fast.roofline.{mod}").COSTS
        merged.update(table)
        merged.matmul_marks |= table.matmul_marks
    return merged
