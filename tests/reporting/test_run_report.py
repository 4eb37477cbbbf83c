"""accuracy.png and report.html from finished run folders
(dawnbench_fast.reporting.run_report), without training: folders written here hold a
run.json and an epochs.jsonl of made-up figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dawnbench_fast.reporting import run_log, run_report


def run_folder(root: Path, seed: int, accs: list[float], target: float = 0.5, log: bool = True) -> Path:
    d = root / f"seed{seed}"
    d.mkdir(parents=True)
    rows = [{"epoch": k + 1, "clock_seconds": 10.0 * (k + 1), "eval_seconds": 1.0, "top1": a, "top5": None,
             "tta": k == len(accs) - 1, "hours": (k + 1) / 360} for k, a in enumerate(accs)]
    hit = next((r for r in rows if r["top1"] >= target), None)
    result = {"seed": seed, "final_top1": accs[-1], "reached_target": hit is not None,
              "tta_seconds": hit and hit["clock_seconds"], "tta_epoch": hit and hit["epoch"],
              "end_clock_seconds": rows[-1]["clock_seconds"], "train_cost_usd": None, "latency_ms": 1.5,
              "inference_valid": accs[-1] >= target, "epochs": rows}
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
    run_report.pyplot.cache_clear()
    try:
        written = run_report.write_report(d, [d], "t")
    finally:
        run_report.pyplot.cache_clear()
    assert written == [d / run_report.HTML_NAME] and not (d / run_report.PLOT_NAME).exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matplotlib is not installed" in err[0]
    assert "<td>60.00</td>" in (d / run_report.HTML_NAME).read_text()


@pytest.mark.parametrize("accs", [[0.1], [0.1, 0.9, 0.95]])
def test_the_plot_draws_the_target_line_in_view(tmp_path, accs):
    """The target is drawn even where every point lies far below it."""
    d = run_folder(tmp_path, 0, accs, target=0.94)
    plt = run_report.pyplot()
    fig = run_report.accuracy_figure(plt, run_report.load_runs([d]))
    try:
        ax = fig.axes[0]
        assert any(list(line.get_ydata()) == [94.0, 94.0] for line in ax.get_lines())
        low, high = ax.get_ylim()
        assert low < 100 * min(accs) and high > 94.0
        assert any(list(line.get_ydata()) == [100 * a for a in accs] for line in ax.get_lines())
    finally:
        plt.close(fig)
