"""Write the full report set into a folder: report.txt, report.json,
roofline.png, roofline.svg and report.html."""

from __future__ import annotations

import pathlib

from dawnbench_fast.roofline.html_report import render_html
from dawnbench_fast.roofline.plot import plot_roofline
from dawnbench_fast.roofline.report import Report
from dawnbench_fast.roofline.text_report import render_text


def write_report_set(rep: Report, out_dir: str | pathlib.Path) -> dict[str, pathlib.Path]:
    """Write every rendering of ``rep`` into ``out_dir``; return the paths by kind."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"text": out / "report.txt", "json": out / "report.json"}
    paths["text"].write_text(render_text(rep, max_rows=None))
    rep.write_json(paths["json"])
    png, svg = plot_roofline(rep, out / "roofline")
    paths["png"], paths["svg"] = png, svg
    paths["html"] = out / "report.html"
    paths["html"].write_text(render_html(rep, svg))
    return paths
