"""Views, allocations and data movement.

Views and allocations move no data: 0 FLOPs and 0 bytes, so they count as
covered ops with their (small) host time. Ops that may or may not copy
(``contiguous``, ``reshape``, ``to``) have no formula of their own: when they
do copy, the profiler records the copying child (``copy_``, ``clone``), which
is counted; when they do not, they are leaves counted here as views.
"""

from __future__ import annotations

from dawnbench_fast.roofline.cost_table import CostTable
from dawnbench_fast.roofline.trace_args import is_tensor, numel, tensor_args, tensor_bytes

COSTS = CostTable()  # registered by roofline.registry

VIEWS = [
    "view", "_unsafe_view", "view_as", "reshape", "_reshape_alias", "flatten", "unflatten",
    "t", "transpose", "permute", "expand", "expand_as", "as_strided", "as_strided_",
    "squeeze", "squeeze_", "unsqueeze", "unsqueeze_", "select", "slice", "narrow", "split",
    "split_with_sizes", "chunk", "unbind", "detach", "detach_", "alias", "resolve_conj",
    "resolve_neg", "conj", "numpy_T", "lift_fresh", "contiguous", "to", "_to_copy", "type_as",
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_",
    "resize_as_", "set_", "result_type", "is_nonzero", "size", "stride", "dim", "is_same_size",
    "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones",
    "new_full", "scalar_tensor", "_has_compatible_shallow_copy_type", "record_stream",
]


def _view(shapes: list, dtypes: list) -> tuple[float, float]:
    return 0.0, 0.0


for _name in VIEWS:
    COSTS.add(f"aten::{_name}", _view)
COSTS.add("detach", _view)  # the autograd-level detach node

# Ops in VIEWS that may have children doing real work (an allocation's fill, a
# copy): the analysis counts their children instead when they have any.
DESCEND_IF_PARENT = frozenset(
    f"aten::{n}"
    for n in ("contiguous", "reshape", "to", "_to_copy", "type_as", "zeros", "zeros_like",
              "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full",
              "flatten", "view_as", "expand_as", "scalar_tensor", "split", "chunk", "unbind")
)


@COSTS.cost("aten::item", "aten::_local_scalar_dense")
def item(shapes: list, dtypes: list) -> tuple[float, float] | None:
    args = tensor_args(shapes, dtypes)
    return 0.0, float(sum(tensor_bytes(s, d) for s, d in args))


@COSTS.cost("aten::cat", "aten::stack", "aten::_cat", "aten::concat", "aten::concatenate",
      "aten::hstack", "aten::vstack")
def cat(shapes: list, dtypes: list) -> tuple[float, float] | None:
    args = tensor_args(shapes, dtypes)
    if not args:
        return None
    moved = sum(numel(s) for s, _ in args) * 4  # TensorList dtypes are not recorded
    return 0.0, 2.0 * moved


@COSTS.cost("aten::flip", "aten::roll", "aten::constant_pad_nd", "aten::reflection_pad1d",
      "aten::reflection_pad2d", "aten::replication_pad2d", "aten::pad", "aten::tril",
      "aten::triu", "aten::repeat", "aten::index_select", "aten::gather", "aten::index",
      "aten::take", "aten::masked_select", "aten::embedding", "aten::unfold", "aten::im2col",
      "aten::col2im", "aten::pixel_shuffle", "aten::channel_shuffle")
def gather_like(shapes: list, dtypes: list) -> tuple[float, float] | None:
    # The output size is not recorded; take it as the first input's size (exact
    # for flips, rolls and triangles, a floor for pads, an estimate otherwise).
    args = tensor_args(shapes, dtypes)
    if not args:
        return None
    return 0.0, float(sum(tensor_bytes(s, d) for s, d in args) + tensor_bytes(*args[0]))


@COSTS.cost("aten::scatter", "aten::scatter_", "aten::scatter_add", "aten::scatter_add_",
      "aten::index_put", "aten::index_put_", "aten::_index_put_impl_", "aten::index_add_",
      "aten::index_copy_", "aten::masked_scatter_", "aten::put_")
def scatter_like(shapes: list, dtypes: list) -> tuple[float, float] | None:
    args = tensor_args(shapes, dtypes)
    if not args:
        return None
    src = sum(tensor_bytes(s, d) for s, d in args[1:])
    return float(sum(numel(s) for s, _ in args[1:2])), float(src + src)


@COSTS.cost("aten::one_hot")
def one_hot(shapes: list, dtypes: list, conc: list) -> tuple[float, float] | None:
    if not shapes or not is_tensor(dtypes[0]):
        return None
    classes = int(conc[1]) if len(conc) > 1 and conc[1].lstrip("-").isdigit() else 1
    n = numel(shapes[0])
    return 0.0, float(n * 8 + n * max(classes, 1) * 8)
