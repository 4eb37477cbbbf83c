"""csrc/ compiles: every .cu with nvcc for sm_80 and sm_90a (warnings are
errors), the C++ sources with g++ -Werror, and the same .cu sources through
NVRTC as CuPy's RawModule compiles them at run time. No GPU needed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dawnbench_fast.csrc import build, sources

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
ARCHS = ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90a,code=sm_90a"]


def test_every_cu_file_is_listed():
    on_disk = sorted(p.name for p in CSRC.glob("*.cu"))
    assert on_disk == sorted(build.CUDA_SOURCES) == sorted(sources.CUDA_SOURCES)
    assert sorted(sources.KERNELS) == on_disk


@pytest.mark.build
@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not installed")
def test_nvcc_compiles_every_cu_for_sm80_and_sm90a_warnings_as_errors(tmp_path):
    nvcc = build.find_nvcc()

    def one(src: Path) -> tuple[str, subprocess.CompletedProcess]:
        cmd = [nvcc, "-std=c++17", "-O3", "-c", str(src), "-o", str(tmp_path / f"{src.stem}.o"),
               "-I", str(CSRC), "-Xcompiler", "-fPIC", *build.NVCC_WARN, *ARCHS,
               "-Xptxas", "-warn-spills,-warn-lmem-usage,-Werror"]
        return src.name, subprocess.run(cmd, capture_output=True, text=True)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(one, sorted(CSRC.glob("*.cu"))))
    failures = {name: r.stderr[-3000:] for name, r in results if r.returncode != 0}
    assert not failures, failures
    for name, r in results:
        assert "warning" not in (r.stdout + r.stderr).lower(), (name, r.stderr)
    # Both architectures really are in the objects, with every kernel name.
    lib = build.cuda_lib_dir(nvcc)
    cuobjdump = shutil.which("cuobjdump") or (str(lib.parent / "bin" / "cuobjdump") if lib else "")
    for src in CSRC.glob("*.cu"):
        obj = tmp_path / f"{src.stem}.o"
        if cuobjdump and Path(cuobjdump).exists():
            listing = subprocess.run([cuobjdump, "--list-elf", str(obj)], capture_output=True,
                                     text=True)
            assert listing.returncode == 0, listing.stderr
            assert "sm_80" in listing.stdout and "sm_90a" in listing.stdout, listing.stdout
        data = obj.read_bytes()
        for kernel in sources.KERNELS[src.name]:
            assert kernel.encode() in data, (src.name, kernel)


@pytest.mark.build
def test_cpu_sources_compile_with_warnings_as_errors(tmp_path):
    import sysconfig

    import pybind11

    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        pytest.skip("no C++ compiler")
    cmd_base = [cxx, "-fsyntax-only", *build.cpu_compile_args(), "-Werror", "-I", str(CSRC),
                "-I", pybind11.get_include(), "-I", sysconfig.get_paths()["include"]]
    # every copy of the kernels the build makes here (baseline and AVX-512 on x86), and bindings
    jobs = [(f"{name} {src}", [*build.copy_args(name, target), str(CSRC / src)])
            for name, target in build.cpu_copies() for src in build.CPU_KERNEL_SOURCES]
    jobs.append(("bindings", [*build.bindings_args(), str(CSRC / build.BINDINGS_SOURCE)]))
    # bindings.cpp with the CUDA launchers declared (the nvcc build's variant)
    jobs.append(("bindings cuda", [*build.bindings_args(), "-DDBF_WITH_CUDA=1",
                                   str(CSRC / build.BINDINGS_SOURCE)]))

    def one(job: tuple[str, list[str]]) -> subprocess.CompletedProcess:
        return subprocess.run([*cmd_base, *job[1]], capture_output=True, text=True)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = dict(zip((j[0] for j in jobs), pool.map(one, jobs), strict=True))
    failures = {n: r.stderr[-3000:] for n, r in results.items() if r.returncode != 0}
    assert not failures, failures


def _nvrtc():
    from dawnbench_fast.csrc import nvrtc

    try:
        nvrtc.library()
    except nvrtc.NvrtcUnavailable as e:
        pytest.skip(str(e))
    return nvrtc


@pytest.mark.build
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_nvrtc_compiles_the_cupy_program(arch):
    nvrtc = _nvrtc()
    # CuPy's RawModule adds -ftz=true (and the architecture) to our options.
    res = nvrtc.compile_program(sources.nvrtc_program(), arch,
                                (*sources.nvrtc_options(), "-ftz=true"))
    assert res.binary[:4] == b"\x7fELF", "NVRTC should return a cubin for a real architecture"
    assert "warning" not in res.log.lower(), res.log
    for names in sources.KERNELS.values():
        for kernel in names:
            assert kernel.encode() in res.binary, kernel


@pytest.mark.build
def test_nvrtc_reports_compile_errors():
    nvrtc = _nvrtc()
    with pytest.raises(nvrtc.NvrtcError, match="NVRTC failed"):
        nvrtc.compile_program('extern "C" __global__ void k() { undefined_thing(); }', "sm_80")


def test_without_nvrtc_one_line_says_which_package_brings_it(monkeypatch):
    from dawnbench_fast.csrc import nvrtc

    def no_library(path):
        raise OSError(f"{path}: cannot open shared object file")

    nvrtc.library.cache_clear()
    monkeypatch.setattr(nvrtc.ctypes, "CDLL", no_library)
    try:
        with pytest.raises(nvrtc.NvrtcUnavailable, match="pip install nvidia-cuda-nvrtc"):
            nvrtc.library()
        with pytest.raises(nvrtc.NvrtcUnavailable):  # and so does every call that needs it
            nvrtc.compile_program('extern "C" __global__ void k() {}', "sm_80")
    finally:
        nvrtc.library.cache_clear()  # the real library for the tests after


def test_build_module_needs_no_torch():
    """setup.py imports csrc/build.py; that must not pull torch in."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import csrc.build as b; "
            "b.ext_modules_and_cmdclass(); assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
