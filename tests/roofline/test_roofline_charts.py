"""The roofline report's figures on made-up rows: the time chart (per op and
per category, as Nsight Systems and HTA summarise a trace) and the roofline
plot's numbered labels, which must not overlap however the points cluster."""

from __future__ import annotations

import itertools

import matplotlib.pyplot as plt
import pytest

from dawnbench_fast.roofline import time_chart
from dawnbench_fast.roofline.peaks import Peaks
from dawnbench_fast.roofline.plot import roofline_figure, text_box
from dawnbench_fast.roofline.report import Report, Row

PEAKS = Peaks("test cpu", {"fp32": 100e9, "bf16": 400e9}, 50e9, "cpu",
              {"fp32": "test", "bf16": "test", "bandwidth": "test"})


def _report(rows: list[Row], uncounted: list[dict] | None = None) -> Report:
    uncounted = uncounted or []
    total = sum(r.time_us for r in rows) + sum(d["time_us"] for d in uncounted)
    for r in rows:
        r.finish(PEAKS, total)
    totals = {"fraction_of_peak": 0.1, "main_precision": "bf16", "flops_per_s": 4e10, "coverage": 0.9}
    return Report("made up", PEAKS, "host", 2, rows, uncounted, [], [], totals, [])


def _row(op: str, time_us: float, flops: float = 1e6, nbytes: float = 1e5, matmul: bool = False,
         shapes: str = "[64, 64]") -> Row:
    return Row(op, shapes, "bf16", "bf16", matmul, calls=1, time_us=time_us, flops=flops, bytes=nbytes)


def test_time_by_op_and_by_category():
    rep = _report([_row("aten::convolution", 500.0, matmul=True), _row("aten::mm", 100.0, matmul=True),
                   _row("aten::native_batch_norm", 150.0), _row("aten::native_batch_norm", 50.0,
                                                                   shapes="[8, 64]"),
                   _row("aten::add_", 40.0), _row("aten::max_pool2d", 30.0), _row("aten::copy_", 20.0)],
                  [{"name": "dawnbench::mystery", "calls": 3, "time_us": 60.0, "share": 0.06}])
    ops = time_chart.op_times(rep)
    assert [(o.op, o.time_us) for o in ops[:3]] == [
        ("aten::convolution", 500.0), ("aten::native_batch_norm", 200.0), ("aten::mm", 100.0)]  # summed
    assert [o.counted for o in ops if o.op == "dawnbench::mystery"] == [False]
    assert time_chart.category_times(rep) == [("matmul/conv", 600.0), ("normalisation", 200.0),
                                             ("elementwise/other", 100.0), ("pooling", 30.0),
                                             ("memory/layout", 20.0)]
    fig = time_chart.time_figure(rep, top=3)
    try:
        by_op, by_cat = fig.axes
        assert [t.get_text() for t in by_op.get_yticklabels()] == [
            "convolution", "native_batch_norm", "mm", "4 other ops"]  # top to bottom
        assert sorted(p.get_width() for p in by_op.patches) == pytest.approx([0.1, 0.15, 0.2, 0.5])  # ms
        assert len(by_cat.patches) == 5
    finally:
        plt.close(fig)


def test_the_roofline_plots_numbers_never_overlap():
    """Eight ops on almost the same point (the big ops cluster under the roof):
    each is numbered, the numbers do not overlap, the key names all eight."""
    rows = [_row(f"aten::op{i}", 100.0 - i, flops=1e6 * (1 + i / 100)) for i in range(8)]
    rep = _report(rows)
    fig, labels = roofline_figure(rep, max_labels=8)
    try:
        renderer = fig.canvas.get_renderer()
        boxes = [text_box(a, renderer) for a in labels]
        assert [a.get_text() for a in labels] == [str(i) for i in range(1, 9)]
        assert not [(i, j) for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2) if a.overlaps(b)]
        key = fig.axes[1].texts[0].get_text()
        assert all(f"{i + 1}  op{i} " in key for i in range(8))
    finally:
        plt.close(fig)
