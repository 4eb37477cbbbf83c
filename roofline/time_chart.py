"""Where the profiled time goes, as Nsight Systems' and HTA's summaries show
it: the ops with the most time (counted and uncounted alike) and the time per
category of op, one bar chart of each, beside the roofline plot.

The categories are by op name (the profiler's, ``aten::``/``dawnbench::``
stripped), first match wins; the matmul/conv category also takes every op
the cost registry marks as a GEMM or convolution (our fused conv groups).
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass

from dawnbench_fast import atomic
from dawnbench_fast.roofline import registry
from dawnbench_fast.roofline.report import Report, time_basis_label

# (category, pattern on the op's short name); a name no pattern matches is "elementwise/other"
CATEGORIES = (
    ("matmul/conv", r"conv|^mm$|^addmm|^bmm|^baddbmm|matmul|linear|gemm"),
    ("normalisation", r"norm|bn_act"),
    ("optimizer", r"foreach|sgd|adam|muon|newton_schulz|optimizer"),
    ("pooling", r"pool"),
    ("softmax/loss", r"softmax|nll|cross_entropy|loss"),
    ("reduction", r"^sum|^mean|^amax|^amin|^max|^min|^var|^std|topk|^argmax|^argmin|^cumsum"),
    ("memory/layout", r"copy|clone|contiguous|^to$|^_to_copy|^cat$|^stack|pad|index|gather|scatter|"
                      r"fill|zero|^empty|transpose|permute|flip|roll|^view|reshape|augment|expand"),
)
OTHER = "elementwise/other"
COLOURS = {"matmul/conv": "#d62728", "normalisation": "#1f77b4", "optimizer": "#9467bd",
           "pooling": "#8c564b", "softmax/loss": "#e377c2", "reduction": "#17becf",
           "memory/layout": "#7f7f7f", OTHER: "#ff7f0e"}


def short_name(op: str) -> str:
    return re.sub(r"^(aten|dawnbench|prims)::", "", op)


def category(op: str) -> str:
    """The category of one op by its profiler name."""
    if registry.is_matmul(op):
        return "matmul/conv"
    name = short_name(op)
    return next((cat for cat, pattern in CATEGORIES if re.search(pattern, name)), OTHER)


@dataclass(frozen=True)
class OpTime:
    op: str
    time_us: float
    category: str
    counted: bool  # has a cost formula (a roofline row) or not (the uncounted list)


def op_times(rep: Report) -> list[OpTime]:
    """Each op's total time over its shapes and dtypes (the report's rows are
    per shape), counted and uncounted, most time first."""
    totals: dict[tuple[str, bool], float] = {}
    for r in rep.rows:
        totals[(r.op, True)] = totals.get((r.op, True), 0.0) + r.time_us
    for d in rep.uncounted:
        totals[(d["name"], False)] = totals.get((d["name"], False), 0.0) + d["time_us"]
    ops = [OpTime(op, t, category(op), counted) for (op, counted), t in totals.items() if t > 0]
    return sorted(ops, key=lambda o: -o.time_us)


def category_times(rep: Report) -> list[tuple[str, float]]:
    """(category, microseconds), most time first."""
    out: dict[str, float] = {}
    for o in op_times(rep):
        out[o.category] = out.get(o.category, 0.0) + o.time_us
    return sorted(out.items(), key=lambda kv: -kv[1])


def time_figure(rep: Report, top: int = 15):
    """Two bar charts: the ``top`` ops by time (the rest summed in one bar)
    and the time per category, each bar coloured by its category."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    ops = op_times(rep)
    total = sum(o.time_us for o in ops) or 1.0
    shown = ops[:top]
    bars = [(short_name(o.op) + ("" if o.counted else " (uncounted)"), o.time_us, COLOURS[o.category])
            for o in shown]
    if len(ops) > top:
        rest = ops[top:]
        bars.append((f"{len(rest)} other ops", sum(o.time_us for o in rest), "#cccccc"))
    cats = category_times(rep)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 0.3 * max(len(bars), len(cats)) + 1.8), dpi=110,
                                      gridspec_kw={"width_ratios": [3, 2]})
    for ax, items, title in ((left, bars, f"ops by time (top {min(top, len(ops))} of {len(ops)})"),
                             (right, [(c, t, COLOURS[c]) for c, t in cats], "time by category")):
        ys = list(range(len(items)))[::-1]
        for y, (_, t, colour) in zip(ys, items, strict=True):
            ax.barh(y, t / 1000, color=colour)
            ax.annotate(f" {t / 1000:.3g} ms ({t / total:.0%})", (t / 1000, y), va="center", fontsize=7)
        ax.set_yticks(ys, [label[:40] for label, _, _ in items], fontsize=7)
        ax.set_xlim(0, max([t for _, t, _ in items] + [1.0]) / 1000 * 1.35)  # room for the value labels
        ax.set_xlabel("ms" + (f" over {rep.steps} steps" if rep.steps else ""))
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"where the op time goes ({time_basis_label(rep)}, {total / 1000:.3g} ms)", fontsize=10)
    fig.tight_layout()
    return fig


def plot_time_chart(rep: Report, out_base: str | pathlib.Path, top: int = 15) -> list[pathlib.Path]:
    """Write ``out_base``.png and ``out_base``.svg (atomically); return their paths."""
    import matplotlib
    import matplotlib.pyplot as plt

    fig = time_figure(rep, top)
    base = pathlib.Path(out_base)
    paths = [base.with_suffix(".png"), base.with_suffix(".svg")]
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text in the SVG
        for p in paths:
            with atomic.atomic_path(p) as tmp:
                fig.savefig(tmp, format=p.suffix[1:])
    plt.close(fig)
    return paths
