"""The roofline plot: log-log, one compute ceiling per precision plus the
bandwidth slope, one point per report row sized by its time.

The points with the most time are numbered, and the numbers explained in a
key beside the plot: the big ops cluster under the roof, where names at the
points (or leader lines to a column of names) cross. Each number is placed
at the first of a ring of offsets around its point where it overlaps no
number placed before it (a leader line joins it to its point when it had to
move away).
"""

from __future__ import annotations

import math
import pathlib

from dawnbench_fast import atomic
from dawnbench_fast.roofline.report import Report, Row

_COLORS = {"fp32": "#1f77b4", "tf32": "#9467bd", "bf16": "#d62728", "fp16": "#ff7f0e",
           "fp64": "#7f7f7f", "fp8": "#8c564b"}


def roofline_figure(rep: Report, max_labels: int = 8):
    """The figure: the roofline plot on the left, the key of its numbered
    points on the right. Returns (figure, the number annotations)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    peaks = rep.peaks
    pts = [r for r in rep.rows if r.flops > 0 and r.intensity and r.time_us > 0]
    xs = [r.intensity for r in pts] or [1.0]
    lo = 10 ** math.floor(math.log10(max(min(xs) / 3, 1e-3)))
    top_peak = max(peaks.flops.values())
    ridge_max = top_peak / peaks.bandwidth
    hi = 10 ** math.ceil(math.log10(max(max(xs) * 3, ridge_max * 10)))

    fig, (ax, key) = plt.subplots(1, 2, figsize=(12.5, 6), dpi=110, gridspec_kw={"width_ratios": [3, 1.25]})
    ax.set_xscale("log")
    ax.set_yscale("log")
    # bandwidth slope up to the highest ceiling, one flat ceiling per precision
    ax.plot([lo, ridge_max], [lo * peaks.bandwidth, top_peak], color="black", lw=1.5,
            label=f"DRAM {peaks.bandwidth / 1e9:.4g} GB/s")
    for prec, peak in sorted(peaks.flops.items(), key=lambda kv: kv[1]):
        ridge = peak / peaks.bandwidth
        ax.plot([ridge, hi], [peak, peak], color=_COLORS.get(prec, "gray"), lw=1.5,
                label=f"{prec} peak {peak / 1e12:.4g} TFLOP/s" if peak >= 1e12
                else f"{prec} peak {peak / 1e9:.4g} GFLOP/s")
    total = sum(r.time_us for r in pts) or 1.0
    for r in pts:
        size = 20 + 2000 * r.time_us / total
        ax.scatter(r.intensity, r.flops_per_s, s=size, alpha=0.55,
                   color=_COLORS.get(r.roof_precision, "gray"),
                   edgecolors="black" if r.matmul else "none", linewidths=0.6)
    labelled = sorted(pts, key=lambda r: -r.time_us)[:max_labels]
    for prec in sorted({r.roof_precision for r in pts}):
        ax.scatter([], [], s=30, color=_COLORS.get(prec, "gray"), alpha=0.55,
                   label=f"ops on the {prec} roof")
    t = rep.totals
    ax.set_xlim(lo, hi)
    ymin = min([r.flops_per_s for r in pts] + [top_peak / 1e4]) / 3
    ax.set_ylim(max(ymin, 1.0), top_peak * 3)
    ax.set_xlabel("arithmetic intensity (FLOP / byte, minimal bytes)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(f"{peaks.name}\n{t['fraction_of_peak']:.1%} of {t['main_precision']} peak "
                 f"({t['flops_per_s'] / 1e9:.4g} GFLOP/s), {t['coverage']:.1%} of op time counted",
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    ax.text(0.01, 0.99, "point area ~ time; black edge = matmul/conv",
            transform=ax.transAxes, fontsize=7, va="top")
    key.axis("off")
    key.text(0.0, 1.0, "numbered points (most time first):\n\n" + "\n".join(
        f"{i:>2}  {_label(r)}" for i, r in enumerate(labelled, 1)), transform=key.transAxes,
        va="top", ha="left", fontsize=7, family="monospace", wrap=True)
    fig.tight_layout()
    return fig, _place_numbers(fig, ax, labelled)


def _label(r: Row) -> str:
    first = r.shapes.split("]")[0] + "]" if "]" in r.shapes else r.shapes  # the first input's shape
    return f"{r.op.replace('aten::', '')} {first[:28]} {r.precision} ({r.share:.0%} of time)"


def _place_numbers(fig, ax, rows: list[Row]) -> list:
    """Number each row's point at the first offset (in points, rings of
    growing radius) where its label overlaps no label placed before it."""
    fig.canvas.draw()  # the layout is final: display coordinates hold
    renderer = fig.canvas.get_renderer()
    placed, labels = [], []
    rings = [(0.0, 0.0)] + [(r * math.cos(math.radians(a)), r * math.sin(math.radians(a)))
                            for r in (9, 16, 24, 34, 46, 60, 76) for a in range(30, 390, 45)]
    for i, row in enumerate(rows, 1):
        for dx, dy in rings:
            ann = ax.annotate(str(i), (row.intensity, row.flops_per_s), xytext=(dx + 7, dy + 7),
                              textcoords="offset points", fontsize=7, fontweight="bold", ha="center",
                              va="center", arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "gray"}
                              if math.hypot(dx, dy) > 9 else None)
            box = text_box(ann, renderer).expanded(1.3, 1.2)
            if not any(box.overlaps(b) for b in placed) or (dx, dy) == rings[-1]:
                placed.append(box)
                labels.append(ann)
                break
            ann.remove()
    return labels


def text_box(ann, renderer):
    """The display box of an annotation's text alone (its own window extent
    includes the leader line)."""
    from matplotlib.text import Text

    return Text.get_window_extent(ann, renderer)


def plot_roofline(rep: Report, out_base: str | pathlib.Path, max_labels: int = 8) -> list[pathlib.Path]:
    """Write ``out_base``.png and ``out_base``.svg (atomically); return their paths."""
    import matplotlib
    import matplotlib.pyplot as plt

    fig, _ = roofline_figure(rep, max_labels)
    base = pathlib.Path(out_base)
    paths = [base.with_suffix(".png"), base.with_suffix(".svg")]
    # text stays text in the SVG (smaller, searchable); read at save time
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        for p in paths:
            with atomic.atomic_path(p) as tmp:
                fig.savefig(tmp, format=p.suffix[1:])
    plt.close(fig)
    return paths
