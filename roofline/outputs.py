"""Write the full report set into a folder: report.txt, report.json,
roofline.png, roofline.svg, time_by_op.png, time_by_op.svg and report.html,
each atomically."""

from __future__ import annotations

import json
import pathlib

from dawnbench_fast import atomic
from dawnbench_fast.roofline.html_report import render_html
from dawnbench_fast.roofline.plot import plot_roofline
from dawnbench_fast.roofline.report import Report
from dawnbench_fast.roofline.text_report import render_text
from dawnbench_fast.roofline.time_chart import plot_time_chart


def write_report_set(rep: Report, out_dir: str | pathlib.Path) -> dict[str, pathlib.Path]:
    """Write every rendering of ``rep`` into ``out_dir``; return the paths by kind."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"text": out / "report.txt", "json": out / "report.json"}
    atomic.write_text(paths["text"], render_text(rep, max_rows=None))
    atomic.write_text(paths["json"], json.dumps(rep.to_dict(), indent=1))
    paths["png"], paths["svg"] = plot_roofline(rep, out / "roofline")
    paths["time_png"], paths["time_svg"] = plot_time_chart(rep, out / "time_by_op")
    paths["html"] = out / "report.html"
    atomic.write_text(paths["html"], render_html(rep, paths["svg"], paths["time_svg"]))
    return paths
