"""Element-wise ops and activations, forward and backward.

FLOPs per output element come from the op's arithmetic, with every
transcendental function (exp, log, erf, tanh, sqrt, ...) counted as 1 FLOP;
the constants are in the tables below. Bytes: every tensor input read once
(its own size: a broadcast scalar costs one element), the output written once.
In-place ops (name ending in ``_``) write their first input back.
"""

from __future__ import annotations

from dawnbench_fast.roofline.cost_table import CostTable
from dawnbench_fast.roofline.trace_args import broadcast, itemsize, numel, tensor_args, tensor_bytes
from dawnbench_fast.vocabulary import ACTIVATIONS

COSTS = CostTable()  # registered by roofline.registry

# op (without the aten:: prefix and without a trailing "_") -> FLOPs / element
ARITHMETIC: dict[str, float] = {
    "add": 1, "sub": 1, "rsub": 1, "mul": 1, "div": 1, "neg": 1, "abs": 1, "sign": 1,
    "reciprocal": 1, "square": 1, "pow": 1, "sqrt": 1, "rsqrt": 1, "exp": 1, "exp2": 1,
    "expm1": 1, "log": 1, "log2": 1, "log1p": 1, "sin": 1, "cos": 1, "erf": 1,
    "maximum": 1, "minimum": 1, "fmod": 1, "remainder": 1, "floor": 1, "ceil": 1,
    "round": 1, "trunc": 1, "frac": 1, "clamp": 2, "clamp_min": 1, "clamp_max": 1,
    "addcmul": 2, "addcdiv": 2, "lerp": 2, "xlogy": 2,
    # activations the vocabulary does not define (relu, gelu, silu: below)
    "threshold": 1, "leaky_relu": 2, "hardtanh": 2, "relu6": 2,
    "sigmoid": 3,  # exp, add, reciprocal
    "tanh": 1,
    "mish": 6, "elu": 3, "selu": 4, "softplus": 3, "hardswish": 4, "hardsigmoid": 3,
    # backward of activations: grad * derivative
    "sigmoid_backward": 3,
    "tanh_backward": 3,
    "hardtanh_backward": 2, "leaky_relu_backward": 2, "elu_backward": 3,
    "hardswish_backward": 4, "softplus_backward": 4, "mish_backward": 9,
}
# The model's activations count as the vocabulary says, so that aten's ops and
# our fused kernels count one activation the same. relu's backward is aten's
# threshold_backward.
for _act in ACTIVATIONS.values():
    if _act.name != "identity":
        ARITHMETIC[_act.name] = _act.flops
        ARITHMETIC["threshold_backward" if _act.name == "relu" else f"{_act.name}_backward"] = _act.grad_flops

# comparisons and logic: 1 FLOP-like op per element, bool output
COMPARE = {"eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and", "logical_or",
           "isnan", "isinf", "isfinite", "bitwise_and", "bitwise_or", "bitwise_xor",
           "bitwise_not"}

# pure data movement through the element-wise path: 0 FLOPs
MOVE = {"where": 0, "masked_fill": 0, "clone": 0, "fill": 0, "zero": 0, "copy": 0,
        "nan_to_num": 1, "lift_fresh_copy": 0}


def elementwise_cost(
    shapes: list, dtypes: list, flops_per_elem: float, inplace: bool, out_dtype: str | None = None,
) -> tuple[float, float] | None:
    """Cost of an element-wise op over its tensor arguments."""
    args = tensor_args(shapes, dtypes)
    if not args:
        return None
    if any(isinstance(s, list) and s and isinstance(s[0], list) for s in shapes):
        # foreach over TensorLists: one output per element of the first list
        total_flops = 0.0
        total_bytes = 0.0
        for shape, dtype in args:
            total_bytes += tensor_bytes(shape, dtype)
        first = shapes[0]
        outs = sum(numel(s) for s in first)
        total_flops = flops_per_elem * outs
        total_bytes += outs * 4  # fp32 outputs (TensorList dtypes are not recorded)
        return total_flops, total_bytes
    out_shape = broadcast(*(s for s, _ in args))
    n_out = numel(out_shape)
    read = sum(tensor_bytes(s, d) for s, d in args)
    if inplace:
        dtype = args[0][1]
    else:
        dtype = out_dtype or max(args, key=lambda a: numel(a[0]))[1]
    return flops_per_elem * n_out, read + n_out * itemsize(dtype)


def _make(flops: float, inplace: bool, out_dtype: str | None = None):
    def fn(shapes: list, dtypes: list) -> tuple[float, float] | None:
        return elementwise_cost(shapes, dtypes, flops, inplace, out_dtype)

    return fn


def _register_family(base: str, flops: float, out_dtype: str | None = None) -> None:
    COSTS.add(f"aten::{base}", _make(flops, False, out_dtype))
    COSTS.add(f"aten::{base}_", _make(flops, True, out_dtype))
    # foreach forms used by the optimizers (out-of-place and in-place)
    COSTS.add(f"aten::_foreach_{base}", _make(flops, False, out_dtype))
    COSTS.add(f"aten::_foreach_{base}_", _make(flops, True, out_dtype))


for _name, _flops in ARITHMETIC.items():
    _register_family(_name, _flops)
for _name in COMPARE:
    _register_family(_name, 1, "bool")
for _name, _flops in MOVE.items():
    _register_family(_name, _flops)


@COSTS.cost("aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize")
def copy_(shapes: list, dtypes: list) -> tuple[float, float] | None:
    # (dst, src, non_blocking): src read once, dst written once
    if len(shapes) < 2:
        return None
    return 0.0, tensor_bytes(shapes[1], dtypes[1]) + tensor_bytes(shapes[0], dtypes[0])


@COSTS.cost("aten::fill_", "aten::zero_", "aten::_foreach_zero_")
def fill_(shapes: list, dtypes: list) -> tuple[float, float] | None:
    args = tensor_args(shapes[:1], dtypes[:1])
    if not args:
        return None
    return 0.0, sum(tensor_bytes(s, d) for s, d in args)


@COSTS.cost("aten::dropout", "aten::native_dropout", "aten::bernoulli_", "aten::uniform_",
      "aten::normal_", "aten::random_")
def random_fill(shapes: list, dtypes: list) -> tuple[float, float] | None:
    args = tensor_args(shapes[:1], dtypes[:1])
    if not args:
        return None
    n = numel(args[0][0])
    return 2.0 * n, 2 * tensor_bytes(*args[0])
