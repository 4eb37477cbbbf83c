"""A module's cost formulas as data: ``{op_name: (fn, is_matmul)}``.

The formula modules (``cost_*`` here, and the cost tables of our kernels) fill
a table and never touch the registry: the registry imports them and registers
their tables, so the import graph has one direction only.
"""

from __future__ import annotations

from collections.abc import Callable

from dawnbench_fast.roofline.trace_args import CostFn


class CostTable(dict[str, tuple[CostFn, bool]]):
    """``{op_name: (fn, is_matmul)}``, the format ``registry.register_costs``
    takes, with a decorator to fill it. ``matmul_marks``: ops put into the
    matmul/conv subtotal whether or not this table has their formula."""

    def __init__(self) -> None:
        super().__init__()
        self.matmul_marks: set[str] = set()

    def add(self, op_name: str, fn: CostFn, *, matmul: bool = False) -> CostFn:
        """Put ``fn`` in the table under ``op_name`` (a later add replaces it)."""
        self[op_name] = (fn, matmul or op_name in self.matmul_marks)
        return fn

    def cost(self, *op_names: str, matmul: bool = False) -> Callable[[CostFn], CostFn]:
        """Decorator form: ``@COSTS.cost("aten::mm", "aten::matmul")``."""

        def deco(fn: CostFn) -> CostFn:
            for name in op_names:
                self.add(name, fn, matmul=matmul)
            return fn

        return deco

    def mark_matmul(self, *op_names: str) -> None:
        """Put these ops' FLOPs into the matmul/conv subtotal."""
        self.matmul_marks.update(op_names)
        for name in op_names:
            if name in self:
                self[name] = (self[name][0], True)
