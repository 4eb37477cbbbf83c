"""The cost registry: FLOPs and minimal DRAM bytes of one call of an op, from
the input shapes and dtypes that a PyTorch profiler trace records.

Conventions, used everywhere in the roofline tool:

- FLOP = 2 x multiply-accumulate (a fused multiply-add counts as 2 FLOPs).
- Minimal bytes = every tensor input read once + every output written once,
  at the dtype's size. It is a lower bound on DRAM traffic: caches that miss,
  re-reads and workspace traffic only add to it.

A cost function takes ``(input_shapes, input_dtypes)`` or
``(input_shapes, input_dtypes, concrete_inputs)``, with the lists exactly as
the trace records them (``Input Dims``, ``Input type``, ``Concrete Inputs``:
one entry per argument, ``[]`` / ``"Scalar"`` / ``""`` for non-tensors, a list
of shapes for a ``TensorList``), and returns ``(flops, bytes)``, or ``None``
when these inputs do not determine the cost (the analysis then counts the
op's children instead).

Our own custom ops (``torch.library.custom_op("dawnbench::<name>", ...)``)
register their formulas here under the name the profiler records::

    from dawnbench_fast.roofline.costs import register_cost
    register_cost("dawnbench::bn_act", lambda shapes, dtypes: (flops, nbytes))
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

Shape = list[int]
Cost = tuple[float, float]  # formulas may add a third element: see count_split
CostFn = Callable[..., Cost | None]

# Bytes per element for the dtype names the profiler writes in "Input type".
DTYPE_BYTES: dict[str, int] = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "long int": 8,
    "long long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::complex<c10::Half>": 4,
}

# Short precision labels, used to pick the compute roof of an op.
DTYPE_PRECISION: dict[str, str] = {
    "float": "fp32",
    "double": "fp64",
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
}

# torch.dtype -> the profiler's name for it (for the live API and tests).
TORCH_DTYPE_NAMES: dict[str, str] = {
    "torch.float32": "float",
    "torch.float64": "double",
    "torch.float16": "c10::Half",
    "torch.bfloat16": "c10::BFloat16",
    "torch.int64": "long int",
    "torch.int32": "int",
    "torch.int16": "short int",
    "torch.int8": "signed char",
    "torch.uint8": "unsigned char",
    "torch.bool": "bool",
}

_REGISTRY: dict[str, tuple[CostFn, bool]] = {}  # name -> (fn, takes concrete inputs)
_MATMUL_OPS: set[str] = set()  # ops whose FLOPs go into the matmul/conv subtotal
_BUILTINS_LOADED = False
# modules holding the cost formulas of our custom ops (dawnbench::*)
OWN_COST_MODULES = ("dawnbench_fast.kernels.costs", "dawnbench_fast.csrc.costs")


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
    _REGISTRY[op_name] = (fn, _takes_concrete(fn))
    if matmul:
        _MATMUL_OPS.add(op_name)
    return fn


def register_costs(table: dict[str, tuple[CostFn, bool]]) -> None:
    """Register a module's formulas at once: ``{op_name: (fn, is_matmul)}``."""
    for name, (fn, is_mm) in table.items():
        register_cost(name, fn, matmul=is_mm)


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
) -> Cost | None:
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
    fn, takes_concrete = entry
    shapes = list(shapes)
    dtypes = list(dtypes) + [""] * (len(shapes) - len(dtypes))
    if takes_concrete:
        conc = list(concrete or [])
        conc += [""] * (len(shapes) - len(conc))
        result = fn(shapes, dtypes, conc)
    else:
        result = fn(shapes, dtypes)
    if result is None:
        return None
    flops, nbytes = float(result[0]), float(result[1])
    if len(result) > 2:
        mm = float(result[2])
    else:
        mm = flops if op_name in _MATMUL_OPS else 0.0
    return flops, nbytes, mm


def _takes_concrete(fn: CostFn) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [
        p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params)


def _load_builtins() -> None:
    """Import the formula modules once (they call register_cost)."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    from dawnbench_fast.roofline import (  # noqa: F401  (imported for registration)
        cost_conv,
        cost_matmul,
        cost_memory,
        cost_norm,
        cost_optim,
        cost_pointwise,
        cost_reduce,
    )

    # Our own kernels' formulas (plain-Python modules, no Triton/CUDA import),
    # so that a trace is counted the same in a fresh process (the CLI) as in
    # the process that ran the kernels.
    for mod in OWN_COST_MODULES:
        try:
            importlib.import_module(mod)
        except ImportError:
            pass  # that backend is not part of this install


# -- helpers shared by the formula modules ----------------------------------


def is_tensor(dtype: str) -> bool:
    """Whether an argument's recorded type names a tensor dtype."""
    return dtype in DTYPE_BYTES


def itemsize(dtype: str) -> int:
    """Bytes per element; 4 for an unknown dtype name (counted as fp32)."""
    return DTYPE_BYTES.get(dtype, 4)


def numel(shape: Sequence[int]) -> int:
    return int(math.prod(shape)) if shape else 1


def tensor_bytes(shape: Sequence[int], dtype: str) -> int:
    return numel(shape) * itemsize(dtype)


def tensor_args(shapes: Sequence[Any], dtypes: Sequence[str]) -> list[tuple[Shape, str]]:
    """(shape, dtype) of every tensor argument, TensorLists flattened (their
    elements' dtype is not recorded: counted as fp32)."""
    out: list[tuple[Shape, str]] = []
    for shape, dtype in zip(shapes, dtypes, strict=False):
        if dtype == "TensorList" or (shape and isinstance(shape[0], list)):
            out.extend((list(s), "float") for s in shape)
        elif is_tensor(dtype):
            out.append((list(shape), dtype))
    return out


def broadcast(*shapes: Sequence[int]) -> Shape:
    """Broadcast shape of several tensor shapes (numpy rules)."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, d in enumerate(s):
            j = ndim - len(s) + i
            out[j] = max(out[j], d) if d != 0 and out[j] != 0 else 0
    return out


def parse_list(text: str) -> list[Any] | None:
    """A recorded concrete list like ``"[1, 1]"`` or ``"[True, False]"``."""
    text = (text or "").strip()
    if not (text.startswith("[") and text.endswith("]")):
        return None
    body = text[1:-1].strip()
    if not body:
        return []
    out: list[Any] = []
    for item in body.split(","):
        item = item.strip()
        if item in ("True", "False"):
            out.append(item == "True")
        else:
            try:
                out.append(int(item))
            except ValueError:
                try:
                    out.append(float(item))
                except ValueError:
                    return None
    return out


def parse_int(text: str, default: int | None = None) -> int | None:
    try:
        return int(str(text).strip())
    except ValueError:
        return default


def precision_of(dtypes: Sequence[str]) -> str:
    """Precision label of an op: its lowest-precision floating tensor input
    (a bf16 x bf16 GEMM runs on the bf16 roof even if a bias is fp32)."""
    order = ["fp8", "fp16", "bf16", "fp32", "fp64"]
    found = [DTYPE_PRECISION[d] for d in dtypes if d in DTYPE_PRECISION]
    if not found:
        return "fp32"
    return min(found, key=order.index)
