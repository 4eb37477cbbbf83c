"""Matrix products: FLOPs = 2 x M x N x K (x batch); bytes = operands read,
result written. Bias adds of addmm/linear are not counted as FLOPs (the
2 x MAC convention of the analytic counts and of FlopCounterMode); their
bytes are."""

from __future__ import annotations

from dawnbench_fast.roofline.cost_table import CostTable
from dawnbench_fast.roofline.trace_args import broadcast, is_tensor, numel, tensor_bytes

COSTS = CostTable()  # registered by roofline.registry


def _out_bytes(shape: list[int], dtype: str) -> int:
    return tensor_bytes(shape, dtype)


@COSTS.cost("aten::mm", "aten::_mm", "aten::mkldnn_mm")
def mm(shapes: list, dtypes: list) -> tuple[float, float] | None:
    if len(shapes) < 2 or len(shapes[0]) != 2 or len(shapes[1]) != 2:
        return None
    (m, k), (_, n) = shapes[0], shapes[1]
    nbytes = tensor_bytes(shapes[0], dtypes[0]) + tensor_bytes(shapes[1], dtypes[1])
    return 2.0 * m * n * k, nbytes + _out_bytes([m, n], dtypes[0])


@COSTS.cost("aten::addmm", "aten::_addmm_activation")
def addmm(shapes: list, dtypes: list) -> tuple[float, float] | None:
    # (bias, mat1, mat2, beta, alpha)
    if len(shapes) < 3 or len(shapes[1]) != 2 or len(shapes[2]) != 2:
        return None
    (m, k), (_, n) = shapes[1], shapes[2]
    nbytes = sum(tensor_bytes(shapes[i], dtypes[i]) for i in range(3))
    return 2.0 * m * n * k, nbytes + _out_bytes([m, n], dtypes[1])


@COSTS.cost("aten::bmm")
def bmm(shapes: list, dtypes: list) -> tuple[float, float] | None:
    if len(shapes) < 2 or len(shapes[0]) != 3 or len(shapes[1]) != 3:
        return None
    (b, m, k), (_, _, n) = shapes[0], shapes[1]
    nbytes = tensor_bytes(shapes[0], dtypes[0]) + tensor_bytes(shapes[1], dtypes[1])
    return 2.0 * b * m * n * k, nbytes + _out_bytes([b, m, n], dtypes[0])


@COSTS.cost("aten::baddbmm")
def baddbmm(shapes: list, dtypes: list) -> tuple[float, float] | None:
    if len(shapes) < 3 or len(shapes[1]) != 3 or len(shapes[2]) != 3:
        return None
    (b, m, k), (_, _, n) = shapes[1], shapes[2]
    nbytes = sum(tensor_bytes(shapes[i], dtypes[i]) for i in range(3))
    return 2.0 * b * m * n * k, nbytes + _out_bytes([b, m, n], dtypes[1])


@COSTS.cost("aten::matmul")
def matmul(shapes: list, dtypes: list) -> tuple[float, float] | None:
    if len(shapes) < 2 or not shapes[0] or not shapes[1]:
        return None
    a, b = list(shapes[0]), list(shapes[1])
    squeeze_a, squeeze_b = len(a) == 1, len(b) == 1
    if squeeze_a:
        a = [1, *a]
    if squeeze_b:
        b = [*b, 1]
    m, k, n = a[-2], a[-1], b[-1]
    batch = broadcast(a[:-2], b[:-2])
    out = [*batch, m, n]
    nbytes = tensor_bytes(shapes[0], dtypes[0]) + tensor_bytes(shapes[1], dtypes[1])
    return 2.0 * numel(batch) * m * n * k, nbytes + _out_bytes(out, dtypes[0])


@COSTS.cost("aten::linear")
def linear(shapes: list, dtypes: list) -> tuple[float, float] | None:
    # (input [..., K], weight [N, K], bias [N]?)
    if len(shapes) < 2 or not shapes[0] or len(shapes[1]) != 2:
        return None
    x, (n, k) = shapes[0], shapes[1]
    rows = numel(x[:-1])
    nbytes = tensor_bytes(x, dtypes[0]) + tensor_bytes(shapes[1], dtypes[1])
    if len(shapes) > 2 and is_tensor(dtypes[2]) and shapes[2]:
        nbytes += tensor_bytes(shapes[2], dtypes[2])
    return 2.0 * rows * n * k, nbytes + _out_bytes([rows, n], dtypes[0])


@COSTS.cost("aten::mv", "aten::addmv")
def mv(shapes: list, dtypes: list) -> tuple[float, float] | None:
    mats = [(s, d) for s, d in zip(shapes, dtypes, strict=False) if is_tensor(d) and len(s) == 2]
    if not mats:
        return None
    (m, k), d = mats[0]
    nbytes = sum(tensor_bytes(s, t) for s, t in zip(shapes, dtypes, strict=False) if is_tensor(t))
    return 2.0 * m * k, nbytes + m * tensor_bytes([1], d)


@COSTS.cost("aten::dot", "aten::vdot")
def dot(shapes: list, dtypes: list) -> tuple[float, float] | None:
    if len(shapes) < 2 or len(shapes[0]) != 1:
        return None
    k = shapes[0][0]
    return 2.0 * k, tensor_bytes(shapes[0], dtypes[0]) * 2 + tensor_bytes([1], dtypes[0])


# These ops' FLOPs form the "matmul/conv" subtotal of a report.
COSTS.mark_matmul(
    "aten::mm", "aten::_mm", "aten::mkldnn_mm", "aten::addmm", "aten::_addmm_activation",
    "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear", "aten::mv",
    "aten::addmv", "aten::dot", "aten::vdot",
)
