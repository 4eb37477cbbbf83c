"""A one-page HTML report: totals, the roofline plot and the time chart
(where the op time goes: per op and per category; inline SVGs), the time per
category and the per-op table, self-contained (no scripts, no external files)."""

from __future__ import annotations

import html
import pathlib

from dawnbench_fast.roofline.report import CONVENTIONS, Report, time_basis_label, timing_tool
from dawnbench_fast.roofline.text_report import si
from dawnbench_fast.roofline.time_chart import category_times


def _inline_svg(path: str | pathlib.Path | None) -> str:
    if not path or not pathlib.Path(path).exists():
        return ""
    svg = pathlib.Path(path).read_text()
    return svg[svg.find("<svg"):]  # drop the XML prolog to inline it


def render_html(rep: Report, svg_path: str | pathlib.Path | None = None,
                time_svg_path: str | pathlib.Path | None = None) -> str:
    """The page; ``svg_path``: the roofline plot, ``time_svg_path``: the time chart."""
    t = rep.totals
    p = rep.peaks
    e = html.escape
    svg = _inline_svg(svg_path)
    total = sum(us for _, us in category_times(rep)) or 1.0
    cats = "\n".join(f"<tr><td>{e(c)}</td><td>{us / 1000:.3f}</td><td>{us / total:.1%}</td></tr>"
                     for c, us in category_times(rep))
    rows = "\n".join(
        "<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in (
            r.op, r.shapes, r.dtypes, r.calls, f"{r.time_us / 1000:.3f}", f"{r.share:.1%}",
            si(r.flops), si(r.measured_bytes if r.measured_bytes is not None else r.bytes)
            + ("*" if r.measured_bytes is not None else ""),
            f"{r.intensity:.3g}" if r.intensity is not None else "-",
            si(r.flops_per_s), si(r.bytes_per_s), f"{r.pct_of_roof:.1%}",
            r.roof_precision if r.flops > 0 else "bw", r.bound)) + "</tr>"
        for r in rep.rows
    )
    unc = "\n".join(
        f"<tr><td>{e(d['name'])}</td><td>{d['calls']}</td><td>{d['time_us'] / 1000:.3f}</td>"
        f"<td>{d['share']:.2%}</td></tr>" for d in rep.uncounted
    ) or "<tr><td colspan=4>(none)</td></tr>"
    roofs = ", ".join(f"{k} {si(v, 'FLOP/s')} ({e(p.source.get(k, ''))})"
                      for k, v in sorted(p.flops.items()))
    wall = (f"Wall clock of the profiled region ({timing_tool(rep)} on, time between ops included): "
            f"{t['wall_time_us'] / 1000:.3f} ms, {t['wall_fraction_of_peak']:.1%} of the peak."
            if "wall_time_us" in t else "")
    warn = "".join(f"<p class=warn>WARNING: {e(w)}</p>" for w in rep.warnings)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Roofline: {e(rep.source)}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; font-size: 12px; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }}
td:nth-child(-n+3), th:nth-child(-n+3) {{ text-align: left; }}
.warn {{ color: #a00; }}
svg {{ max-width: 100%; height: auto; }}
</style></head><body>
<h1>Roofline report</h1>
<p>Source: {e(rep.source)}<br>Device: {e(p.name)} ({e(p.kind)}); roofs: {roofs};
bandwidth {si(p.bandwidth, 'B/s')} ({e(p.source.get('bandwidth', ''))})<br>
{e(p.notes) + '<br>' if p.notes else ''}
Time basis: {e(time_basis_label(rep))}
{f', {rep.steps} steps' if rep.steps else ''}</p>
{warn}
<p><b>{t['fraction_of_peak']:.1%}</b> of the {e(t['main_precision'])} peak:
{si(t['flops_per_s'], 'FLOP/s')} over {t['op_time_us'] / 1000:.3f} ms of op time
({t['coverage']:.2%} of it counted). FLOPs {si(t['flops'])} (matmul/conv
{si(t['matmul_conv_flops'])}), minimal bytes {si(t['bytes'], 'B')}. Matmul/conv alone:
{si(t['matmul_conv_flops_per_s'], 'FLOP/s')} = {t['matmul_conv_fraction_of_peak']:.1%}.
{wall}</p>
<p><small>{e(CONVENTIONS)}</small></p>
{svg}
<h2>Where the op time goes</h2>
{_inline_svg(time_svg_path)}
<table><tr><th>category</th><th>ms</th><th>share</th></tr>
{cats}
</table>
<h2>Ops</h2>
<table><tr><th>op</th><th>shapes</th><th>dtype</th><th>calls</th><th>ms</th><th>share</th>
<th>FLOP</th><th>bytes</th><th>FLOP/B</th><th>FLOP/s</th><th>B/s</th><th>% of roof</th>
<th>roof</th><th>bound</th></tr>
{rows}
</table>
<h2>Uncounted ops</h2>
<table><tr><th>name</th><th>calls</th><th>ms</th><th>share</th></tr>
{unc}
</table>
</body></html>
"""
