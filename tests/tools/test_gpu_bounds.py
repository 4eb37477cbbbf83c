"""tools/gpu_suite/bounds.py: the bound table of the custom GPU ops,
its bounds computed from the peaks table, and the measured times read from
both sources it takes (a pytest-benchmark JSON, a GPU suite's suite.json)."""

from __future__ import annotations

import json

import pytest

from tools.gpu_suite import bounds as gpu_bounds


def _row(lines: list[str], op: str, shape: str) -> list[str]:
    (line,) = [x for x in lines if x.startswith(f"| {op} | {shape}")]
    return [c.strip() for c in line.strip("|").split("|")]


def test_bounds_are_bytes_over_bandwidth_or_flops_over_peak(capsys):
    assert gpu_bounds.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    cells = _row(lines, "bn_act", "C=64 @15px")
    n = 2000 * 64 * 15 * 15  # the H100 run's batch
    assert cells[4] == f"{8 * 2 * n / 3.35e12 * 1e6:.1f} us (m)"  # 8 bf16 passes over HBM3
    assert cells[5] == f"{8 * 2 * n / 4.8e12 * 1e6:.1f} us (m)"   # H200
    assert cells[6] == "1484.9 us" and cells[8] == "1804.2 us"     # torch, Triton as measured
    gemm = _row(lines, "gemm (mma.sync)", "4096^3")
    assert gemm[4] == f"{2 * 4096 ** 3 / 989e12 * 1e6:.1f} us (c)" and gemm[9] == "2076.6 us"
    assert len({x.count("|") for x in lines if x.startswith("|")}) == 1  # one column count


def test_a_suite_json_is_read_at_the_recipes_batch(tmp_path, capsys):
    case = f"bn_act fwd+bwd {gpu_bounds.CifarRecipe().act} C=256 @7px b=1536"  # as the suite names it
    suite = {"environment": {"gpu": {"name": "NVIDIA H200"}}, "parts": {"ops": {"cases": [
        {"op": "bn_act", "case": case, "impl": "torch", "median_ms": 0.5, "kernel_ms": 0.3, "status": "ok"},
        {"op": "bn_act", "case": case, "impl": "torch.compile[inductor]", "median_ms": 0.4, "status": "ok"},
        {"op": "bn_act", "case": case, "impl": "triton", "median_ms": 0.25, "kernel_ms": 0.2, "status": "ok"},
        {"op": "bn_act", "case": case, "impl": "cuda", "median_ms": None, "status": "error"}]}}}
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(suite))
    assert gpu_bounds.main(["--measured", str(path)]) == 0
    out = capsys.readouterr().out
    cells = _row(out.splitlines(), "bn_act", "C=256 @7px")
    assert "batch 1536" in out and cells[6:10] == ["500.0 us", "400.0 us", "250.0 us", ""]
    assert cells[10] == "0.50"
    n = 1536 * 256 * 7 * 7  # the best of ours against the measured GPU's bound (8 bf16 passes at 4.8 TB/s)
    assert "best ours / H200 bound" in out and cells[11] == f"{250.0 / (8 * 2 * n / 4.8e12 * 1e6):.1f}x"
    # the kernels' time a call instead of the eager median: only the faces that recorded one
    assert gpu_bounds.main(["--measured", str(path), "--times", "kernel"]) == 0
    out = capsys.readouterr().out
    cells = _row(out.splitlines(), "bn_act", "C=256 @7px")
    assert "kernel times" in out and cells[6:10] == ["300.0 us", "", "200.0 us", ""] and cells[10] == "0.67"


def test_the_suites_case_names_are_the_bound_tables_keys():
    from tools.gpu_suite import ops as gpu_suite_ops

    keys = {k.format(b=1536) for row in gpu_bounds.rows(1536) for k in row.keys}
    suite_cases = {c.name for c in gpu_suite_ops.cases(dry_run=False)}
    assert suite_cases <= keys, suite_cases - keys


def test_a_missing_file_is_one_line_and_exit_2(tmp_path, capsys):
    assert gpu_bounds.main(["--measured", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no such file" in err
    with pytest.raises(SystemExit):
        gpu_bounds.main(["--batch", "x"])
