"""Fused optimizer updates. Non-fused optimizers run per-tensor or
``_foreach_*`` element-wise ops, which cost_pointwise counts.

Per parameter element (fp32 state unless recorded otherwise):
- SGD with momentum: buf = m * buf + g (2), p -= lr * (buf or nesterov) (2-4):
  4 FLOPs; reads p, g, buf, writes p, buf.
- Adam/AdamW: two moment updates, bias corrections, sqrt, divide, update:
  about 12 FLOPs; reads p, g, m, v, writes p, m, v.
"""

from __future__ import annotations

from dawnbench_fast.roofline.cost_table import CostTable
from dawnbench_fast.roofline.trace_args import numel

COSTS = CostTable()  # registered by roofline.registry


def _list_elems(shapes: list, i: int) -> int:
    if i >= len(shapes) or not shapes[i] or not isinstance(shapes[i][0], list):
        return 0
    return sum(numel(s) for s in shapes[i])


@COSTS.cost("aten::_fused_sgd_", "aten::_fused_sgd")
def fused_sgd(shapes: list, dtypes: list) -> tuple[float, float] | None:
    # (params, grads, momentum_buffer_list, ...)
    n = _list_elems(shapes, 0)
    if not n:
        return None
    has_buf = _list_elems(shapes, 2) > 0
    flops = 4.0 * n if has_buf else 2.0 * n
    tensors_read = 3 if has_buf else 2
    tensors_written = 2 if has_buf else 1
    return flops, 4.0 * n * (tensors_read + tensors_written)


@COSTS.cost("aten::_fused_adam_", "aten::_fused_adamw_", "aten::_fused_adam", "aten::_fused_adamw")
def fused_adam(shapes: list, dtypes: list) -> tuple[float, float] | None:
    # (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, ...)
    n = _list_elems(shapes, 0)
    if not n:
        return None
    return 12.0 * n, 4.0 * n * 7
