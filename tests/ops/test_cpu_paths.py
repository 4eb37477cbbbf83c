"""The portable native build: the CPU kernels are compiled for a
baseline target and with AVX-512, and ``_C`` calls the copy the CPU runs,
chosen at import (csrc/build.py, csrc/bindings.cpp); no -march=native unless
DAWNBENCH_MARCH asks; DAWNBENCH_CPU_PATH=baseline forces the baseline copy;
the choice is reported; without a C++ compiler one line says so, at install
and at run time. The two copies' results are compared bit for bit in
tests/ops/test_bn_act_pool.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.cifar import task as cifar_task
from dawnbench_fast.csrc import build, engine, native
from dawnbench_fast.hardware.machine import cpu_flags

ROOT = Path(__file__).resolve().parents[2]
needs_build = pytest.mark.skipif(native.unavailable_reason() is not None,
                                 reason=f"no C++ build: {native.unavailable_reason()}")


def _all_flags(machine: str) -> list[str]:
    flags = [*build.cpu_compile_args(), *build.bindings_args(machine)]
    for name, target in build.cpu_copies(machine):
        flags += build.copy_args(name, target)
    return flags


def test_default_build_is_portable(monkeypatch):
    monkeypatch.delenv("DAWNBENCH_MARCH", raising=False)
    x86 = build.cpu_copies("x86_64")
    assert [name for name, _ in x86] == ["baseline", "avx512"]  # baseline first: the link order
    assert x86[0][1] == ["-march=x86-64", "-mtune=generic"]
    assert {"-mavx512f", "-mavx512bw", "-mavx512vl"} <= set(x86[1][1])  # what bn_act_vec.h needs
    assert not any(f.startswith("-march=") and f != "-march=x86-64" for f in _all_flags("x86_64"))
    # elsewhere: one copy, the compiler's default target
    assert build.cpu_copies("aarch64") == [("baseline", [])]
    assert not any(f.startswith(("-march", "-m")) for f in _all_flags("aarch64")
                   if not f.startswith("-mtune"))
    assert "-DDBF_HAVE_CPU_AVX512" in build.bindings_args("x86_64")


def test_dawnbench_march_asks_for_one_copy(monkeypatch):
    monkeypatch.setenv("DAWNBENCH_MARCH", "native")
    assert build.cpu_copies("x86_64") == [("march", ["-march=native"])]
    assert "-march=native" in build.bindings_args("x86_64")
    assert '-DDBF_CPU_MARCH="native"' in build.bindings_args("x86_64")
    portable = build.jit_module_name()
    monkeypatch.delenv("DAWNBENCH_MARCH")
    assert build.jit_module_name() != portable  # never loaded for one another from the cache


def test_runtime_check_covers_the_avx512_copy_flags():
    """bindings.cpp checks each feature the AVX-512 copy is compiled with."""
    checked = re.findall(r'__builtin_cpu_supports\("(\w+)"\)', (build.HERE / "bindings.cpp").read_text())
    assert sorted(checked) == sorted(build.AVX512_FEATURES)
    avx512 = dict(build.cpu_copies("x86_64"))["avx512"]
    assert sorted(f[2:] for f in avx512 if f.startswith("-m") and not f.startswith("-mtune=")) == sorted(
        build.AVX512_FEATURES)


@needs_build
def test_runtime_choice_is_reported():
    mod = native.load()
    paths = dict(mod.cpu_paths())
    assert mod.cpu_path() in paths and paths[mod.cpu_path()]
    if mod.cpu_march:  # a DAWNBENCH_MARCH build
        assert mod.cpu_path() == "march"
    else:
        flags = cpu_flags()
        want = "avx512" if build.is_x86() and {"avx512f", "avx512bw", "avx512vl"} <= flags else "baseline"
        if not flags and build.is_x86():
            want = mod.cpu_path()  # no /proc/cpuinfo to judge by
        if os.environ.get("DAWNBENCH_CPU_PATH") in (None, "", "auto"):
            assert mod.cpu_path() == want
        assert mod.nhwc_kernels_vectorised() == (mod.cpu_path() == "avx512")
    assert engine.cpu_path() == mod.cpu_path()
    assert cifar_task.kernel_choices("cpu")["cpu_kernels_path"] == mod.cpu_path()  # run.json
    assert cifar_task.kernel_choices("torch")["cpu_kernels_path"] is None
    with pytest.raises(ValueError, match="not in this build"):
        mod.set_cpu_path("sse1")


def _in_subprocess(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **env}, timeout=120)


@needs_build
def test_dawnbench_cpu_path_forces_the_baseline_copy():
    if native.load().cpu_march:
        pytest.skip("a DAWNBENCH_MARCH build has one copy")
    code = ("import warnings; warnings.simplefilter('error')\n"
            "from dawnbench_fast.csrc import native\n"
            "m = native.load(); print(m.cpu_path(), m.nhwc_kernels_vectorised())")
    r = _in_subprocess(code, DAWNBENCH_CPU_PATH="baseline")
    assert r.returncode == 0 and r.stdout.split() == ["baseline", "False"], r.stderr[-2000:]
    # a path that is not there: the best one serves, and a warning says why
    r = _in_subprocess(code.replace("'error'", "'always'"), DAWNBENCH_CPU_PATH="neon")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[0] == native.load().cpu_path()
    assert "DAWNBENCH_CPU_PATH=neon ignored" in r.stderr


@needs_build
def test_avx512_copy_shares_no_code_with_the_baseline_one():
    """Library templates (std::vector...) instantiated by both copies are kept
    once by the linker; they must be the baseline's (the link order), so no
    shared (weak or global) function outside the avx512 namespace may use
    AVX registers: it would be called by the baseline copy too."""
    so = native.load().__file__
    if not (shutil.which("objdump") and shutil.which("nm")):
        pytest.skip("needs binutils")
    shared = {line.split()[-1] for line in subprocess.run(["nm", "--defined-only", so], capture_output=True,
                                                           text=True).stdout.splitlines()
              if line.split()[1:2] and line.split()[1] in "TWVu"}
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", so], capture_output=True, text=True).stdout
    bad, fn = set(), ""
    for line in dis.splitlines():
        if line.endswith(">:"):
            fn = line[line.index("<") + 1:-2]
        elif "%zmm" in line or "%ymm" in line:
            if fn in shared and "6avx512" not in fn:
                bad.add(fn)
    assert not bad, sorted(bad)[:10]


@pytest.fixture
def fresh_native(monkeypatch, tmp_path):
    """native.load() from scratch with no installed _C (restored after)."""
    native.load.cache_clear()
    monkeypatch.setattr(native, "_import_installed", lambda: None)
    monkeypatch.setattr(native, "_no_compiler", None)
    monkeypatch.setenv("DAWNBENCH_CACHE", str(tmp_path / "cache"))
    yield
    native.load.cache_clear()


def test_no_compiler_at_run_time_one_line_and_torch_serves(fresh_native, monkeypatch, capsys):
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    reason = dispatch.unavailable_reason("cpu", torch.device("cpu"))
    assert reason is not None and "no C++ compiler found" in reason and "\n" not in reason
    assert dispatch.resolve_backend("auto", "cpu") == "torch"  # the fallback auto already had
    with pytest.raises(dispatch.KernelsUnavailable, match="no C.. compiler found"):
        dispatch.resolve_backend("cpu", "cpu")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no C++ compiler found ('/nonexistent/g++'" in err[0], err  # once


@pytest.mark.build
def test_no_compiler_at_install_one_line_and_install_succeeds(tmp_path):
    """setup.py's build without a compiler on PATH: exit 0, no _C, one line."""
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "dawnbench_fast").mkdir()
    # the package's version, which pyproject reads from it (statically)
    shutil.copy(ROOT / "dawnbench_fast" / "__init__.py", tmp_path / "dawnbench_fast" / "__init__.py")
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX", "LDSHARED")}
    env["PATH"] = str(Path(sys.executable).parent)  # python, but no compiler
    if shutil.which("g++", path=env["PATH"]) or shutil.which("gcc", path=env["PATH"]):
        pytest.skip("a compiler sits beside python")
    env["DAWNBENCH_NO_CUDA"] = "1"
    r = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("dawnbench_fast._C:")]
    assert len(lines) == 1 and "no C++ compiler found" in lines[0], r.stderr[-3000:]
    assert not list((tmp_path / "dawnbench_fast").glob("_C*"))
