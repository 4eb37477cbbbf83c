"""accuracy.png and report.html from finished run folders
(dawnbench_fast.reporting.run_report), without training: folders written here hold a
run.json and an epochs.jsonl of made-up figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dawnbench_fast.reporting import run_figures, run_log, run_report

PHASES = {"data_load": 2.0, "warmup": 8.0, "init": 0.5, "train": 30.0, "eval": 1.5, "latency": 4.0}
SPLITS = {"augment": 1.0, "forward": 11.0, "backward": 17.0, "optimizer": 1.0}


def run_folder(root: Path, seed: int, accs: list[float], target: float = 0.5, log: bool = True,
               top5: list[float] | None = None) -> Path:
    """A finished run's folder; with ``top5`` an ImageNet-like run whose
    target is on top-5 (``accs`` are then its top-1)."""
    d = root / f"seed{seed}"
    d.mkdir(parents=True)
    top5 = top5 or [None] * len(accs)
    rows = [{"epoch": k + 1, "clock_seconds": 10.0 * (k + 1), "eval_seconds": 1.0, "top1": a, "top5": a5,
             "tta": k == len(accs) - 1, "hours": (k + 1) / 360}
            for k, (a, a5) in enumerate(zip(accs, top5, strict=True))]
    metric = "top1" if top5[0] is None else "top5"
    hit = next((r for r in rows if r[metric] >= target), None)
    result = {"seed": seed, "final_top1": accs[-1], "final_top5": top5[-1], "target_metric": metric,
              "reached_target": hit is not None,
              "tta_seconds": hit and hit["clock_seconds"], "tta_epoch": hit and hit["epoch"],
              "end_clock_seconds": rows[-1]["clock_seconds"], "train_cost_usd": None, "latency_ms": 1.5,
              "inference_valid": rows[-1][metric] >= target, "phases_seconds": PHASES,
              "train_split_seconds": SPLITS, "epochs": rows}
    run = {"hardware": "Test CPU", "device": "cpu", "kernels_backend": "torch", "git": {"sha": "abc"},
           "versions": {"torch": "2"}, "command": ["python", "-m", "x"],
           "config": {"target": target, "precision": "bf16", "seed": seed}, "result": result}
    (d / "run.json").write_text(json.dumps(run))
    if log:
        log_file = run_log.EpochLog(d / run_log.LOG_NAME)
        for r in rows:
            log_file.append({"seed": seed, "epoch": r["epoch"], "train_loss": 2.0 / r["epoch"],
                             "lr": {"head": 0.5 / r["epoch"]}, "top1": r["top1"], "top5": None,
                             "tta": r["tta"], "clock_seconds": r["clock_seconds"],
                             "wall_seconds": r["clock_seconds"] + 1})
    return d


def test_report_of_several_runs(tmp_path):
    dirs = [run_folder(tmp_path, 0, [0.3, 0.55]), run_folder(tmp_path, 1, [0.2, 0.45])]
    written = run_report.write_report(tmp_path, dirs, "DAWNBench test report")
    assert written == [tmp_path / run_report.PLOT_NAME, tmp_path / run_report.HTML_NAME]
    assert (tmp_path / run_report.PLOT_NAME).read_bytes().startswith(b"\x89PNG")
    page = (tmp_path / run_report.HTML_NAME).read_text()
    assert page.count("<h3>seed") == 2
    for acc in ("30.00", "55.00", "20.00", "45.00"):
        assert f"<td>{acc}</td>" in page
    assert "reached target: 1/2" in page and "50.00 +- 7.07%" in page
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_an_older_run_without_a_log_still_gets_its_accuracy_table(tmp_path):
    d = run_folder(tmp_path, 0, [0.4, 0.6], log=False)
    run_report.write_report(d, [d], "t")
    page = (d / run_report.HTML_NAME).read_text()
    assert "<td>40.00</td>" in page and "<td>60.00</td>" in page


def test_without_matplotlib_the_page_is_written_with_a_note(tmp_path, monkeypatch, capsys):
    d = run_folder(tmp_path, 0, [0.6])
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    run_figures.pyplot.cache_clear()
    try:
        written = run_report.write_report(d, [d], "t")
    finally:
        run_figures.pyplot.cache_clear()
    assert written == [d / run_report.HTML_NAME] and not (d / run_report.PLOT_NAME).exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matplotlib is not installed" in err[0]
    assert "<td>60.00</td>" in (d / run_report.HTML_NAME).read_text()


@pytest.mark.parametrize("accs", [[0.1], [0.1, 0.9, 0.95]])
def test_the_plot_draws_the_target_line_in_view(tmp_path, accs):
    """The target is drawn even where every point lies far below it."""
    d = run_folder(tmp_path, 0, accs, target=0.94)
    plt = run_figures.pyplot()
    fig = run_figures.accuracy_figure(plt, run_report.load_runs([d]))
    try:
        ax = fig.axes[0]
        assert any(list(line.get_ydata()) == [94.0, 94.0] for line in ax.get_lines())
        low, high = ax.get_ylim()
        assert low < 100 * min(accs) and high > 94.0
        assert any(list(line.get_ydata()) == [100 * a for a in accs] for line in ax.get_lines())
    finally:
        plt.close(fig)


def test_the_imagenet_report_plots_top5_against_its_top5_target(tmp_path):
    """ImageNet's 93% target is on top-5: the plot, the summary and the page
    say top-5 and plot the top-5 figures, not top-1 against a top-5 line."""
    top1, top5 = [0.40, 0.70, 0.76], [0.60, 0.90, 0.935]
    d = run_folder(tmp_path, 0, top1, target=0.93, top5=top5)
    runs = run_report.load_runs([d])
    plt = run_figures.pyplot()
    fig = run_figures.accuracy_figure(plt, runs)
    try:
        ax = fig.axes[0]
        curves = [list(line.get_ydata()) for line in ax.get_lines()]
        assert [100 * a for a in top5] in curves and [100 * a for a in top1] not in curves
        assert [93.0, 93.0] in curves  # the target line
        assert [93.5] in curves  # the star: the first top-5 at or above 93%
        assert ax.get_ylabel() == "test top-5, %"
        labels = ax.get_legend_handles_labels()[1]
        assert "target 93.00% top-5" in labels and "seed 0: 93.50% top-5" in labels
    finally:
        plt.close(fig)
    run_report.write_report(d, [d], "t")
    page = (d / run_report.HTML_NAME).read_text()
    assert "target 93.00% top-5" in page and "<th>top-5 %</th>" in page and "<td>93.50</td>" in page
    assert "final top-5: 93.50 +- 0.00%" in page
    assert "top-1" not in page.split("<h2>Per epoch</h2>")[0].split("<h2>Summary</h2>")[0]  # header: top-5


def test_the_page_shows_where_the_time_goes_and_the_training_loss(tmp_path):
    d = run_folder(tmp_path, 0, [0.3, 0.55])
    runs = run_report.load_runs([d])
    plt = run_figures.pyplot()
    fig = run_figures.phase_figure(plt, runs)
    try:
        (ax,) = fig.axes
        widths = sorted(bar.get_width() for bar in ax.patches)
        assert widths == sorted([*PHASES.values(), *SPLITS.values()])  # a bar per phase and split
        assert {t.get_text() for t in ax.get_yticklabels()} == {*PHASES, *(f"train: {k}" for k in SPLITS)}
    finally:
        plt.close(fig)
    run_report.write_report(d, [d], "t")
    page = (d / run_report.HTML_NAME).read_text()
    assert '<img alt="phase-time chart" src="data:image/png;base64,' in page
    assert '<img alt="training-loss curve" src="data:image/png;base64,' in page
    # the console's table too, and the time to target with the warm-up charged (20 + 8 s)
    assert "<tr><td>warmup</td><td>8.00</td><td>outside the clock</td></tr>" in page
    assert "<tr><td>train: backward</td><td>17.00</td><td>part of train</td></tr>" in page
    assert "<th>with the warm-up s</th>" in page and "<td>20.0</td><td>28.0</td>" in page


def test_without_a_log_there_is_no_loss_curve_and_the_page_says_why(tmp_path):
    d = run_folder(tmp_path, 0, [0.6], log=False)
    run_report.write_report(d, [d], "t")
    page = (d / run_report.HTML_NAME).read_text()
    assert "(no training-loss curve: the run logged nothing to draw it from)" in page
    assert 'alt="phase-time chart"' in page
