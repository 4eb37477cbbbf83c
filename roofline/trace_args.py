"""Reading the arguments a PyTorch profiler trace records for one op call:
shapes, dtype names and concrete values, as every cost formula receives them.

A formula gets three parallel lists, one entry per argument of the op's
schema (``Input Dims``, ``Input type``, ``Concrete Inputs``): ``[]`` /
``"Scalar"`` / ``""`` for non-tensors, a list of shapes for a ``TensorList``.
Dtype sizes come from :mod:`dawnbench_fast.vocabulary`, the house's one table.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

from dawnbench_fast.vocabulary import ACTIVATIONS, DTYPE_BYTES, Activation
from dawnbench_fast.vocabulary import itemsize as _vocab_itemsize

Shape = list[int]
Cost = tuple[float, float]  # formulas may add a third element: see registry.count_split
CostFn = Callable[..., Cost | None]

# Short precision labels, used to pick the compute roof of an op.
DTYPE_PRECISION: dict[str, str] = {
    "float": "fp32",
    "double": "fp64",
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
}

# torch.dtype -> the profiler's name for it (for the live API, FlopCounterMode and tests).
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


def is_tensor(dtype: str) -> bool:
    """Whether an argument's recorded type names a tensor dtype."""
    return dtype in DTYPE_BYTES


def itemsize(dtype: str) -> int:
    """Bytes per element; 4 for an unknown dtype name (counted as fp32)."""
    return _vocab_itemsize(dtype)


def numel(shape: Sequence[int]) -> int:
    """Elements of a shape; 1 for ``[]`` (a 0-d tensor)."""
    return int(math.prod(shape)) if shape else 1


def tensor_bytes(shape: Sequence[int], dtype: str) -> int:
    """Bytes of a tensor of this shape and dtype name."""
    return numel(shape) * itemsize(dtype)


# Helpers of our custom ops' formulas (kernels/<op>_costs.py, csrc/<op>_costs.py).
def arg_numel(shape: Sequence[int]) -> int:
    """Elements of a tensor argument; 0 for ``[]`` (an argument the trace did
    not record, or an empty operand that switches a kernel's option off)."""
    return int(math.prod(shape)) if shape else 0


def arg_bytes(shape: Sequence[int], dtype: Any) -> int:
    """Bytes of a tensor argument (:func:`arg_numel` elements of ``dtype``)."""
    return arg_numel(shape) * itemsize(dtype)


def arg_activation(concrete: Sequence[Any] | None, i: int) -> Activation:
    """The activation named by argument ``i``; GELU, the net's default, when
    the trace does not say (the profiler records no str argument)."""
    if concrete and len(concrete) > i:
        name = str(concrete[i]).strip("'\"")
        if name in ACTIVATIONS:
            return ACTIVATIONS[name]
    return ACTIVATIONS["gelu"]


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


def _parse_item(item: str) -> Any:
    if item in ("True", "False"):
        return item == "True"
    for kind in (int, float):
        try:
            return kind(item)
        except ValueError:
            pass
    raise ValueError(item)


def parse_list(text: str) -> list[Any] | None:
    """A recorded concrete list like ``"[1, 1]"`` or ``"[True, False]"``."""
    text = (text or "").strip()
    if not (text.startswith("[") and text.endswith("]")):
        return None
    body = text[1:-1].strip()
    if not body:
        return []
    try:
        return [_parse_item(item.strip()) for item in body.split(",")]
    except ValueError:
        return None


def parse_int(text: str, default: int | None = None) -> int | None:
    """A recorded concrete int, ``default`` when it is not one."""
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


def takes_concrete(fn: CostFn) -> bool:
    """Whether a formula takes the third list (concrete inputs)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params)


def call_formula(
    fn: CostFn,
    shapes: Sequence[Any],
    dtypes: Sequence[str],
    concrete: Sequence[str] | None = None,
    with_concrete: bool | None = None,
) -> tuple[float, ...] | None:
    """Call a formula with the lists padded to one entry per argument (a trace
    may record fewer dtypes or concrete values than shapes). ``with_concrete``:
    :func:`takes_concrete` of ``fn`` when the caller has it cached."""
    shapes = list(shapes)
    dtypes = list(dtypes) + [""] * (len(shapes) - len(dtypes))
    if with_concrete is None:
        with_concrete = takes_concrete(fn)
    if not with_concrete:
        return fn(shapes, dtypes)
    conc = list(concrete or [])
    conc += [""] * (len(shapes) - len(conc))
    return fn(shapes, dtypes, conc)
