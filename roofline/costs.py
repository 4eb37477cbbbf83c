"""The old home of the cost registry and its formula helpers, kept so that
code written against it keeps working while callers move: the registry is
:mod:`dawnbench_fast.roofline.registry`, the helpers are
:mod:`dawnbench_fast.roofline.trace_args`, dtype sizes are
:mod:`dawnbench_fast.vocabulary`. New code imports those."""

from __future__ import annotations

from dawnbench_fast.roofline.registry import (  # noqa: F401  (re-exported)
    _MATMUL_OPS,
    _REGISTRY,
    ENTRY_POINT_GROUP,
    cost,
    count,
    count_split,
    has_cost,
    is_matmul,
    mark_matmul,
    register_cost,
    register_costs,
    register_flop_formulas,
    registered_ops,
)
from dawnbench_fast.roofline.trace_args import (  # noqa: F401  (re-exported)
    DTYPE_PRECISION,
    TORCH_DTYPE_NAMES,
    Cost,
    CostFn,
    Shape,
    broadcast,
    is_tensor,
    itemsize,
    numel,
    parse_int,
    parse_list,
    precision_of,
    tensor_args,
    tensor_bytes,
)
from dawnbench_fast.vocabulary import DTYPE_BYTES  # noqa: F401  (re-exported)
