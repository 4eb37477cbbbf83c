"""The roofline plot: log-log, one compute ceiling per precision plus the
bandwidth slope, one point per report row sized by its time."""

from __future__ import annotations

import math
import pathlib

from dawnbench_fast.roofline.report import Report

_COLORS = {"fp32": "#1f77b4", "tf32": "#9467bd", "bf16": "#d62728", "fp16": "#ff7f0e",
           "fp64": "#7f7f7f", "fp8": "#8c564b"}


def plot_roofline(rep: Report, out_base: str | pathlib.Path, max_labels: int = 6) -> list[pathlib.Path]:
    """Write ``out_base``.png and ``out_base``.svg; return their paths."""
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

    fig, ax = plt.subplots(figsize=(9, 6), dpi=110)
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
    # label the biggest points from a stacked column of text (the big ops
    # cluster under the roof, where labels at the points would overlap)
    for i, r in enumerate(sorted(pts, key=lambda r: -r.time_us)[:max_labels]):
        ax.annotate(f"{r.op.replace('aten::', '')} {r.shapes.split(',')[0]} {r.precision} "
                    f"({r.share:.0%} of time)",
                    (r.intensity, r.flops_per_s), fontsize=7,
                    xytext=(0.50, 0.60 - 0.045 * i), textcoords="axes fraction",
                    arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "gray"})
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
    fig.tight_layout()
    base = pathlib.Path(out_base)
    paths = [base.with_suffix(".png"), base.with_suffix(".svg")]
    # text stays text in the SVG (smaller, searchable); read at save time
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        for p in paths:
            fig.savefig(p)
    plt.close(fig)
    return paths
