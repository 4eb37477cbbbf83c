"""Build of ``dawnbench_fast._C`` for setup.py, and the same build at run time.

Needs pybind11 and a C++ compiler, never torch (an isolated build would pull a
multi-GB CUDA torch). When nvcc is found, the .cu files are compiled too and the
CUDA launchers are linked in (cudart static); otherwise, or if that compile
fails, the module holds the CPU (OpenMP) build only. Installing never fails for
lack of CUDA, and it prints what it built.

Environment:
- ``DAWNBENCH_NO_CUDA=1``: skip the CUDA part even where nvcc exists.
- ``DAWNBENCH_CUDA_ARCHS``: gencode list (default ``80;90a``; sm_80 also
  carries PTX so newer GPUs can JIT it).
- ``DAWNBENCH_MARCH``: ``-march`` of the CPU build (default ``native``: the
  editable install builds on the machine that runs it; empty = compiler default).

This module imports nothing outside the standard library except pybind11 and
setuptools, so setup.py can load it from the source tree.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXT_NAME = "dawnbench_fast._C"
CPU_SOURCES = ["bindings.cpp", "cpu_bn_act.cpp", "cpu_fused_bn.cpp", "cpu_augment.cpp", "cpu_gemm.cpp"]
CUDA_SOURCES = ["bn_act.cu", "augment.cu", "gemm_mma.cu"]
SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".cpp")


def source_hash(folder: Path = HERE) -> str:
    """Hash of every C++/CUDA source in csrc/: a built module records it, so a
    stale build (sources edited after `pip install -e`) is detected at import."""
    h = hashlib.sha256()
    for p in sorted(folder.iterdir()):
        if p.suffix in SOURCE_SUFFIXES:
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def find_nvcc() -> str | None:
    """Path of nvcc (PATH, then CUDA_HOME / CUDA_PATH, then /usr/local/cuda)."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").exists():
            return str(Path(root) / "bin" / "nvcc")
    return None


def cuda_lib_dir(nvcc: str) -> Path | None:
    """Folder holding libcudart_static.a. nvcc may be a wrapper script, so its
    own idea of the toolkit root (``nvcc --dryrun``'s TOP) is asked first."""
    roots = [Path(nvcc).resolve().parent.parent]
    try:
        cmd = [nvcc, "--dryrun", "-x", "cu", "-c", "/dev/null", "-o", "/dev/null"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        for line in (r.stdout + r.stderr).splitlines():
            if line.startswith("#$ TOP="):
                roots.insert(0, Path(line.split("=", 1)[1].strip()).resolve())
    except (OSError, subprocess.SubprocessError):
        pass
    for root in roots:
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            if (root / sub / "libcudart_static.a").exists():
                return root / sub
    return None


def gencode_flags() -> list[str]:
    archs = os.environ.get("DAWNBENCH_CUDA_ARCHS", "80;90a").replace(",", ";").split(";")
    flags = []
    for a in filter(None, (x.strip() for x in archs)):
        code = f"[sm_{a},compute_{a}]" if a == "80" else f"sm_{a}"
        flags.append(f"-gencode=arch=compute_{a},code={code}")
    return flags


# Warnings are errors in every compile of our own sources (tests use the same).
NVCC_WARN = ["-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror"]


def nvcc_compile_cmd(nvcc: str, src: Path, obj: Path, extra: list[str] | None = None) -> list[str]:
    return [
        nvcc, "-std=c++17", "-O3", "-c", str(src), "-o", str(obj), "-I", str(HERE),
        "-Xcompiler", "-fPIC", *NVCC_WARN, *gencode_flags(), *(extra or []),
    ]  # fmt: skip


def cpu_compile_args() -> list[str]:
    march = os.environ.get("DAWNBENCH_MARCH", "native")
    # -ffp-contract=off: no fused multiply-add, so results round as the torch
    # references do; -fno-trapping-math: lets the math loops vectorise (we
    # never read FP exception flags); values are still IEEE.
    args = ["-std=c++17", "-O3", "-fopenmp", "-ffp-contract=off", "-fno-trapping-math",
            "-Wall", "-Wextra"]
    if march:
        args.append(f"-march={march}")
    return args


def compile_cuda_objects(nvcc: str, out_dir: Path) -> list[str]:
    """Compile CUDA_SOURCES in parallel; returns object paths. Raises on error."""
    out_dir.mkdir(parents=True, exist_ok=True)

    def one(name: str) -> str:
        obj = out_dir / (Path(name).stem + ".o")
        cmd = nvcc_compile_cmd(nvcc, HERE / name, obj)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"nvcc failed on {name}:\n{r.stderr[-4000:]}")
        return str(obj)

    with ThreadPoolExecutor(max_workers=min(len(CUDA_SOURCES), os.cpu_count() or 1)) as pool:
        return list(pool.map(one, CUDA_SOURCES))


def _say(msg: str) -> None:
    print(f"dawnbench_fast._C: {msg}", file=sys.stderr, flush=True)


def ext_modules_and_cmdclass() -> tuple[list, dict]:
    """What setup.py passes to setup(): the extension and its build command."""
    if os.environ.get("DAWNBENCH_NO_EXT", "") not in ("", "0"):
        _say("DAWNBENCH_NO_EXT set: not built; the CPU C++ kernels will be built at first use")
        return [], {}
    try:
        import pybind11
        from setuptools import Extension
        from setuptools.command.build_ext import build_ext
    except ImportError as e:  # pragma: no cover - pybind11 is a build requirement
        _say(f"not built ({e}); the CPU/CUDA C++ kernels will be built at first use")
        return [], {}

    rel = os.path.relpath(HERE, Path.cwd())
    ext = Extension(
        EXT_NAME,
        sources=[os.path.join(rel, s) for s in CPU_SOURCES],
        include_dirs=[pybind11.get_include(), str(HERE)],
        define_macros=[("DBF_SOURCE_HASH", f'"{source_hash()}"')],
        extra_compile_args=cpu_compile_args(),
        extra_link_args=["-fopenmp"],
        language="c++",
    )

    class BuildExt(build_ext):
        """Adds the nvcc objects when CUDA is usable; never fails the install."""

        def build_extension(self, ext):  # noqa: ANN001 - setuptools signature
            with_cuda = self._add_cuda(ext)
            try:
                super().build_extension(ext)
            except Exception as e:  # compiler missing or broken: install without _C
                _say(f"NOT built ({type(e).__name__}: {e}); the CPU C++ kernels will be "
                     "compiled at first use if a compiler appears, the CUDA path needs CuPy")
                return
            what = "CPU (OpenMP) kernels" + (
                " + CUDA kernels for " + ", ".join(gencode_flags()) if with_cuda else ""
            )
            _say(f"built {what}")

        def _add_cuda(self, ext) -> bool:  # noqa: ANN001
            if os.environ.get("DAWNBENCH_NO_CUDA", "") not in ("", "0"):
                _say("DAWNBENCH_NO_CUDA set: building the CPU part only")
                return False
            nvcc = find_nvcc()
            if nvcc is None:
                _say("no CUDA toolkit (nvcc) found: building the CPU part only; "
                     "`--kernels cuda` can still use CuPy (pip install 'dawnbench-fast[cuda]')")
                return False
            libdir = cuda_lib_dir(nvcc)
            if libdir is None:
                _say(f"{nvcc} found but no libcudart_static.a beside it: CPU part only")
                return False
            try:
                objs = compile_cuda_objects(nvcc, Path(self.build_temp) / "cuda")
            except (RuntimeError, OSError) as e:
                _say(f"CUDA compile failed, building the CPU part only: {e}")
                return False
            ext.extra_objects = list(ext.extra_objects or []) + objs
            ext.define_macros = list(ext.define_macros or []) + [("DBF_WITH_CUDA", "1")]
            ext.library_dirs = list(ext.library_dirs or []) + [str(libdir)]
            ext.libraries = list(ext.libraries or []) + ["cudart_static", "dl", "rt", "pthread"]
            return True

    return [ext], {"build_ext": BuildExt}


def jit_module_name() -> str:
    """Module name of the run-time build (unique per source version)."""
    return f"_C_jit_{source_hash()}"


def build_cpu_module(out_dir: Path) -> Path:
    """Run-time build of the CPU-only module (no setup.py involved): used when
    the installed ``_C`` is missing or older than the sources. Returns the path
    of the built shared object; raises RuntimeError with the compiler output."""
    import sysconfig

    import pybind11

    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    name = jit_module_name()
    target = out_dir / f"{name}{suffix}"
    cxx = os.environ.get("CXX", "g++")
    includes = ["-I", pybind11.get_include(), "-I", sysconfig.get_paths()["include"], "-I", str(HERE)]
    flags = [*cpu_compile_args(), "-fPIC", f'-DDBF_SOURCE_HASH="{source_hash()}"',
             f"-DDBF_MODULE_NAME={name}"]

    def one(name: str) -> str:
        obj = out_dir / (Path(name).stem + ".o")
        r = subprocess.run([cxx, *flags, *includes, "-c", str(HERE / name), "-o", str(obj)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{cxx} failed on {name}:\n{r.stderr[-4000:]}")
        return str(obj)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        objs = list(pool.map(one, CPU_SOURCES))
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    r = subprocess.run([cxx, "-shared", "-fopenmp", *objs, "-o", str(tmp)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"linking _C failed:\n{r.stderr[-4000:]}")
    os.replace(tmp, target)  # atomic: concurrent builders never see half a file
    return target
