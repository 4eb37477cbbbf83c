"""The benchmarks: every micro and step benchmark in benchmarks/ is
a pytest-benchmark module that the normal test run never collects; each one
runs (at tiny settings here, so that none rots) or skips cleanly without the
data or the GPU it needs; the script command lines docs/PERFORMANCE.md quotes
still work and save JSON that ``--benchmark-compare`` reads back."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.cifar_data import cifar_dir

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
# Studies of a whole run or a trained model (latency_ab.py: a trained net's two forms timed image
# by image, which pytest-benchmark's rounds cannot interleave), not timings of kernels or steps:
# they stay scripts (docs/PERFORMANCE.md, "How to run, save and compare").
# (The GPU suite, its sweeps and bounds are measuring tools: tools/gpu_suite/.)
SCRIPTS = {"bench_selective_tta.py", "bench_tta_views.py", "roofline_cifar_step.py", "bench_in_step.py",
           "projection_check.py", "latency_ab.py"}
HELPERS = {"conftest.py", "knobs.py", "script_entry.py"}
# Sizes at which every benchmark runs in seconds (their figures mean nothing).
TINY = {"BENCH_BATCH": "8", "BENCH_ROUNDS": "1", "BENCH_IMAGES": "2", "BENCH_AUG_BATCH": "16",
        "BENCH_CALLS": "4", "BENCH_ARMS": "dawnbench_fast:batch_size=8", "DAWNBENCH_BENCH_BATCH": "8"}


def _benchmark_tests(path: Path) -> list[str]:
    """The test functions of ``path`` that take pytest-benchmark's fixture."""
    return [node.name for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
            and "benchmark" in [a.arg for a in node.args.args]]


def test_the_test_run_collects_tests_only_and_a_named_benchmark_file_is_collected():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert ini["testpaths"] == ["tests"]  # `python -m pytest` never walks into benchmarks/
    assert "bench_*.py" in ini["python_files"]  # `python -m pytest benchmarks` finds them all
    assert ".benchmarks/" in (ROOT / ".gitignore").read_text().split()  # saved runs stay local


def test_every_timing_benchmark_is_a_pytest_benchmark_module():
    files = {p.name for p in BENCH.glob("*.py")}
    assert SCRIPTS | HELPERS <= files, "a listed script or helper is gone: update this test"
    for name in sorted(files - SCRIPTS - HELPERS):
        assert name.startswith("bench_"), f"benchmarks/{name}: name it bench_*.py (pytest collects those)"
        assert _benchmark_tests(BENCH / name), f"benchmarks/{name}: no test_* taking `benchmark`"
    for name in SCRIPTS:
        assert not _benchmark_tests(BENCH / name)


def _pytest_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # tests/conftest sets it
    return {**env, **TINY, **extra}


def _skip_reasons(output: str) -> list[str]:
    return re.findall(r"^SKIPPED \[\d+\] \S+: (.*)$", output, re.MULTILINE)


@pytest.mark.e2e
def test_every_benchmark_runs_tiny_or_skips_without_its_data_or_gpu(tmp_path):
    empty = tmp_path / "no-cifar"
    empty.mkdir()
    r = subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "-q", "-rs", "-p", "no:cacheprovider",
                        f"--benchmark-storage={tmp_path / 'store'}"],
                       cwd=ROOT, env=_pytest_env(DAWNBENCH_DATA=str(empty)), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert re.search(r"\d+ passed", r.stdout), r.stdout[-2000:]
    reasons = _skip_reasons(r.stdout)
    assert any("CIFAR-10 not found" in why for why in reasons), reasons  # the data ones did skip
    for why in reasons:
        assert "CIFAR-10 not found" in why or "CUDA" in why or "unavailable here" in why, why


# What a Zen machine lacks that the AMX Xeon has, and what a CPU without AVX-512 BF16 lacks
# besides (dawnbench_fast.hardware.machine.HIDE_FLAGS_ENV): hidden, the benchmarks that need
# them must skip with the reason, on every machine, including those that have them.
ABSENT = {"amx": "amx_bf16,amx_tile,amx_int8", "amx+avx512_bf16": "amx_bf16,amx_tile,amx_int8,avx512_bf16"}
# the benchmark files whose kernels depend on those capabilities
CAPABILITY_BENCHES = ["bench_cpu_train_step.py", "bench_conv_shapes.py", "bench_recipe_step.py"]
# What each runs, on the data: without AMX (a Zen machine's set), every step benchmark (`-k step`:
# those three files' step benchmarks and the others') and the conv shapes, so that the step
# benchmarks run on the data in the same run; without AVX-512 BF16 too, the capability files.
SELECTIONS = {"amx": ["benchmarks", "-k", "step or conv_shapes"],
              "amx+avx512_bf16": [f"benchmarks/{f}" for f in CAPABILITY_BENCHES]}


@pytest.mark.e2e
@pytest.mark.parametrize("absent", sorted(ABSENT))
def test_the_benchmarks_run_on_the_data_and_skip_what_the_cpu_lacks(tmp_path, absent):
    """On a Zen 4 machine main once failed its own CI, the AMX weight gradient
    called on a CPU without AMX tiles; the recorded runs had all been on the AMX Xeon."""
    r = subprocess.run([sys.executable, "-m", "pytest", *SELECTIONS[absent],
                        "-q", "-rs", "-p", "no:cacheprovider", f"--benchmark-storage={tmp_path / 'store'}"],
                       cwd=ROOT, env=_pytest_env(DAWNBENCH_HIDE_CPU_FLAGS=ABSENT[absent],
                                                 DAWNBENCH_DATA=str(cifar_dir())),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    reasons = _skip_reasons(r.stdout)
    assert any("amx unavailable here" in why for why in reasons), reasons  # the AMX weight gradient skipped
    assert any("AMX tiles" in why for why in reasons), reasons  # bench_conv_shapes' interleaved AMX timing
    if "avx512_bf16" in ABSENT[absent]:
        assert any("dpbf16 unavailable here" in why for why in reasons), reasons
    for why in reasons:  # none skipped for the data
        assert "unavailable here" in why or "CUDA" in why, why
    assert re.search(r"\d+ passed", r.stdout), r.stdout[-2000:]
    if absent == "amx":  # the step benchmarks ran on the data
        assert re.search(r"\b([4-9]|\d\d+) passed", r.stdout), r.stdout[-2000:]


def test_hidden_flags_reach_the_checks_in_front_of_the_native_kernels(monkeypatch):
    """The C++ build asks CPUID itself: the Python checks in front of it honour
    DAWNBENCH_HIDE_CPU_FLAGS (the test above relies on it)."""
    from dawnbench_fast.csrc import conv_group_wgrad
    from dawnbench_fast.hardware import machine

    monkeypatch.setenv(machine.HIDE_FLAGS_ENV, "amx_bf16, avx512_bf16")
    assert not {"amx_bf16", "avx512_bf16"} & machine.cpu_flags()
    assert not conv_group_wgrad.amx_supported() and not conv_group_wgrad.supported()
    assert not conv_group_wgrad.onednn_has_amx.__wrapped__()


@pytest.mark.e2e
def test_a_documented_script_command_saves_json_that_the_next_run_compares_with(tmp_path):
    store = tmp_path / "store"
    script = [sys.executable, str(BENCH / "bench_csrc_cpu.py"), "--batch", "8", "--reps", "1",
              "-k", "test_bn_act_latency and not torch", f"--benchmark-storage={store}",
              "-p", "no:cacheprovider"]
    first = subprocess.run(script, cwd=tmp_path, env=_pytest_env(), capture_output=True, text=True,
                           timeout=300)
    if "1 skipped" in first.stdout:
        pytest.skip("the C++ build is unavailable here")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    second = subprocess.run([*script, "--benchmark-compare"], cwd=tmp_path, env=_pytest_env(),
                            capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-3000:]
    assert "Comparing against benchmarks from" in second.stderr  # pytest-benchmark's log
    saved = sorted(store.rglob("*.json"))
    assert [p.name[:4] for p in saved] == ["0001", "0002"]
    bench = json.loads(saved[-1].read_text())["benchmarks"]
    assert [b["name"] for b in bench] == ["test_bn_act_latency[csrc]"]
    assert bench[0]["stats"]["iterations"] == 200 and bench[0]["extra_info"]["threads"] >= 1
