"""What every analysis leaves in ``--out``: ``<command>.json`` (the figures),
``<command>.png`` (its plot, matplotlib Agg) and ``<command>.txt`` (the
text printed on screen), each written atomically (dawnbench_fast.reporting.bench).

JSON holds null, never NaN, where a figure does not exist (a time to a target
never reached): NaN is not JSON, and a reader would take it for a number. The
writer refuses NaN, so a figure that slipped through fails here, loudly.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dawnbench_fast import atomic
from dawnbench_fast.reporting import run_figures


def fmt_time(seconds: float | None) -> str:
    """A time to an accuracy, or "not reached"."""
    return "not reached" if seconds is None else f"{seconds:.1f} s"


def fmt_pct(fraction: float | None, digits: int = 2) -> str:
    return "-" if fraction is None else f"{100 * fraction:.{digits}f}%"


def fmt_mean_std(d: dict, scale: float = 1.0, unit: str = "", digits: int = 1) -> str:
    """``mean +- std unit`` of a stats.describe dict; "not reached" without values."""
    if not d["n"]:
        return "not reached"
    std = "" if d["std"] is None else f" +- {scale * d['std']:.{digits}f}"
    return f"{scale * d['mean']:.{digits}f}{std}{unit}"


def gap(value: float | None) -> float:
    """A plotted value: None becomes nan, where matplotlib leaves a gap (plots only, never JSON)."""
    return float("nan") if value is None else value


def write_outputs(out: Path, command: str, data: dict, text: str,
                  draw: Callable[[Any], Any] | None) -> list[Path]:
    """Write ``<command>.json``, ``.txt`` and (where matplotlib is installed)
    ``.png`` from ``draw(pyplot) -> figure``; print ``text``; return the paths."""
    print(text)
    payload = json.dumps(data, indent=2, allow_nan=False, default=str) + "\n"
    written = [out / f"{command}.json", out / f"{command}.txt"]
    atomic.write_text(written[0], payload)
    atomic.write_text(written[1], text + "\n")
    plt = run_figures.pyplot() if draw is not None else None
    if plt is not None:
        fig = draw(plt)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        plt.close(fig)
        with atomic.atomic_path(out / f"{command}.png") as tmp:
            tmp.write_bytes(buf.getvalue())
        written.append(out / f"{command}.png")
    print(f"written: {', '.join(str(p) for p in written)}")
    return written
