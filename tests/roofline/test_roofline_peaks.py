"""Device peaks: the GPU table, name matching, the override file, and the CPU
microbenchmark with its per-user cache."""

from __future__ import annotations

import json

import pytest

from dawnbench_fast.roofline import cpu_peaks as cpu_peaks_mod
from dawnbench_fast.roofline.peak_choice import resolve_peaks
from dawnbench_fast.roofline.peaks import (
    GPU_TABLE,
    load_peaks_file,
    match_gpu,
    table_entry,
)


def test_table_has_every_gpu_with_sources():
    for name in ("V100 SXM2", "T4", "A10", "L4", "A100 40GB", "A100 80GB", "A100 40GB PCIe",
                 "A100 80GB PCIe", "H100 SXM", "H100 PCIe", "H100 NVL", "H200"):
        p = GPU_TABLE[name]
        assert p.flops["fp32"] > 0 and p.bandwidth > 0
        assert ("bf16" in p.flops) or ("fp16" in p.flops)
        assert all(p.source.get(k) for k in [*p.flops, "bandwidth"]), name
        assert set(p.clock_mhz) == set(p.flops), name  # every figure says the clock it holds at
    h100 = GPU_TABLE["H100 SXM"]
    assert h100.flops["bf16"] == pytest.approx(989e12)
    assert h100.flops["tf32"] == pytest.approx(495e12)
    assert h100.bandwidth == pytest.approx(3.35e12)
    assert GPU_TABLE["A100 80GB"].bandwidth > GPU_TABLE["A100 40GB"].bandwidth


def test_unknown_devices():
    assert match_gpu("NVIDIA L40S") is None
    assert match_gpu("AMD Instinct MI300X") is None
    with pytest.raises(ValueError, match="--device 'MI300X'"):
        table_entry("MI300X")


def test_roof_fallbacks():
    t4 = GPU_TABLE["T4"]
    assert t4.roof("bf16") == ("fp16", 65e12)  # T4 has no bf16: its fp16 tensor roof
    assert t4.roof("tf32") == ("fp32", 8.1e12)
    assert GPU_TABLE["H200"].roof("fp32") == ("fp32", 67e12)


def test_peaks_file_override(tmp_path):
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"name": "locked clocks", "base": "H100 SXM",
                             "tflops": {"bf16": 700}, "bandwidth_tbs": 3.0}))
    p = load_peaks_file(f)
    assert p.flops["bf16"] == pytest.approx(700e12)
    assert p.flops["fp32"] == pytest.approx(67e12)  # kept from the base entry
    assert p.bandwidth == pytest.approx(3.0e12)
    assert "user file" in p.source["bf16"] and "datasheet" in p.source["fp32"]
    assert resolve_peaks(peaks_file=str(f)).name == "locked clocks"


def test_peaks_file_errors(tmp_path):
    with pytest.raises(ValueError, match="--peaks .*no such file"):
        load_peaks_file(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_peaks_file(bad)
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    with pytest.raises(ValueError, match="needs at least one of tflops"):
        load_peaks_file(empty)


def test_gpu_trace_without_known_device_needs_a_flag():
    with pytest.raises(ValueError, match="--device NAME or --peaks FILE"):
        resolve_peaks(on_gpu=True, trace_devices=[{"name": "Mystery GPU"}])


def test_cpu_peaks_measured_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []
    real_measure = cpu_peaks_mod.measure

    def counting_measure(budget_s):
        calls.append(budget_s)
        return real_measure(budget_s)

    monkeypatch.setattr(cpu_peaks_mod, "measure", counting_measure)
    p = cpu_peaks_mod.cpu_peaks(budget_s=0.02)
    assert calls == [0.02]
    assert cpu_peaks_mod.cache_path().exists()
    assert str(tmp_path) in str(cpu_peaks_mod.cache_path())
    assert p.kind == "cpu"
    assert p.flops["fp32"] > 1e9 and p.flops["bf16"] > 1e9 and p.bandwidth > 1e9
    assert p.source["bandwidth"].startswith("measured") and p.measured
    again = cpu_peaks_mod.cpu_peaks(budget_s=0.02)
    assert calls == [0.02]  # served from the cache
    assert again.flops == p.flops
    cpu_peaks_mod.cpu_peaks(refresh=True, budget_s=0.02)
    assert len(calls) == 2
    cpu_peaks_mod.cpu_peaks(reset=True, budget_s=0.02)
    assert len(calls) == 3


def test_refresh_keeps_the_best_rate_per_microbenchmark():
    old = {"gemm_fp32": {"flops": 5.0, "what": "a"}, "copy": {"bytes_per_s": 9.0, "what": "c"}}
    new = {"gemm_fp32": {"flops": 7.0, "what": "b"}, "copy": {"bytes_per_s": 4.0, "what": "d"}}
    best = cpu_peaks_mod.merge_best(old, new)
    assert best["gemm_fp32"]["what"] == "b"  # faster now
    assert best["copy"]["what"] == "c"  # faster before (the machine was busy now)
