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
- ``DAWNBENCH_MARCH``: unset or empty (the default), a portable build: the CPU
  kernels are compiled twice, for a baseline target (x86-64; elsewhere the
  compiler's default) and with AVX-512 (x86 only), and ``_C`` calls the copy
  the CPU runs, chosen when it loads (``_C.cpu_path()``; ``DAWNBENCH_CPU_PATH=
  baseline`` forces the baseline one). Set (e.g. ``native``), one copy built
  with ``-march=<it>``: for this machine only, not for a wheel.

This module imports nothing outside the standard library except pybind11 and
setuptools, so setup.py can load it from the source tree.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXT_NAME = "dawnbench_fast._C"
BINDINGS_SOURCE = "bindings.cpp"
# Compiled once per CPU copy (cpu_copies), each in its own namespace.
CPU_KERNEL_SOURCES = ["bn_act_cpu.cpp", "bn_act_pool_cpu.cpp", "augment_cpu.cpp", "gemm_mma_cpu.cpp",
                      "conv_group_wgrad_cpu.cpp", "conv_group_wgrad_pooled_cpu.cpp",
                      "conv_group_wgrad_amx_cpu.cpp", "conv_group_dgrad_pooled_cpu.cpp",
                      "bias_act_cpu.cpp", "cpu_api.cpp"]
CPU_SOURCES = [BINDINGS_SOURCE, *CPU_KERNEL_SOURCES]
# What the AVX-512 copy is compiled for, and what bindings.cpp checks with
# __builtin_cpu_supports before it calls that copy (the two lists must agree;
# a test reads bindings.cpp). bn_act_vec.h needs F, BW and VL; the rest is what
# every AVX-512 CPU with those has (x86-64-v4), free for the compiler to use.
AVX512_FEATURES = ("avx2", "fma", "bmi", "bmi2", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")
CUDA_SOURCES = ["bn_act.cu", "augment.cu", "gemm_mma.cu", "bias_act.cu"]
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
    """Flags of every CPU compile (bindings and each copy), no target flags."""
    # -ffp-contract=off: no fused multiply-add, so results round as the torch
    # references do (and the AVX-512 copy as the baseline one); -fno-trapping-math:
    # lets the math loops vectorise (we never read FP exception flags); values
    # are still IEEE.
    return ["-std=c++17", "-O3", "-fopenmp", "-ffp-contract=off", "-fno-trapping-math",
            "-Wall", "-Wextra"]


def is_x86(machine: str | None = None) -> bool:
    """Whether the build targets x86 (the machine we build on: no cross builds)."""
    return (machine or platform.machine()).lower() in ("x86_64", "amd64", "i386", "i686")


def march() -> str:
    """``DAWNBENCH_MARCH``: empty (the default) for the portable build."""
    return os.environ.get("DAWNBENCH_MARCH", "").strip()


def baseline_target_args(machine: str | None = None) -> list[str]:
    """Target flags of the baseline copy and of bindings.cpp. Explicit on x86,
    so that a compiler or Python whose default flags are newer (a conda
    Python's CFLAGS, a distro's -march) still gives code every x86-64 runs."""
    return ["-march=x86-64", "-mtune=generic"] if is_x86(machine) else []


# Scheduling (never the instruction set) of the AVX-512 copy. The CPUs that
# run it are Intel's since Skylake-X and AMD's since Zen 4; g++ 12 knows Zen 5
# as znver3 with AVX-512, which is what -march=native meant on this project's
# machines. Measured there (docs/PERFORMANCE.md, "The portable build"):
# -mtune=generic made the fused BN + activation backward passes 10-15% slower
# than -march=native, -mtune=znver3 as fast. Intel CPUs are not measured.
AVX512_TUNE = "-mtune=znver3"


def cpu_copies(machine: str | None = None) -> list[tuple[str, list[str]]]:
    """(name, target flags) of each copy of the CPU kernels to build, lowest
    target first (the link order: see link_objects_in_order)."""
    if march():
        return [("march", [f"-march={march()}"])]
    copies = [("baseline", baseline_target_args(machine))]
    if is_x86(machine):
        copies.append(("avx512", [AVX512_TUNE, *(f"-m{f}" for f in AVX512_FEATURES)]))
    return copies


def bindings_args(machine: str | None = None) -> list[str]:
    """Flags of bindings.cpp: the baseline target (it runs before any CPU
    check) and which copies are linked in."""
    target = [f"-march={march()}"] if march() else baseline_target_args(machine)
    have = [f"-DDBF_HAVE_CPU_{name.upper()}" for name, _ in cpu_copies(machine)]
    if march():
        have.append(f'-DDBF_CPU_MARCH="{march()}"')
    return [*target, *have]


def copy_args(name: str, target: list[str]) -> list[str]:
    """Flags of one copy's sources: its target and its namespace."""
    return [*target, f"-DDBF_CPU_ISA={name}"]


def link_objects_in_order(objs_by_copy: list[list[str]]) -> list[str]:
    """The copies' objects, lowest target first. Why the order matters: both
    copies instantiate the same library templates (std::vector and the like,
    outside our namespaces), the linker keeps the first definition it meets,
    and that one must be the baseline's, which every CPU runs."""
    return [o for objs in objs_by_copy for o in objs]


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


def no_compiler_message(cxx: str) -> str:
    """The one line a user without a C++ compiler reads, at install and at run time."""
    return (f"no C++ compiler found ({cxx!r} is not on PATH): the C++ kernels are not built and "
            "--kernels auto uses torch's; to get them, install one (e.g. `apt install g++`, "
            "`xcode-select --install`) or point CXX at one, then `pip install -e .` again "
            "(or just rerun: the CPU part is then compiled at first use)")


def missing_executable(commands: list[list[str] | None]) -> str | None:
    """The first program of these compiler command lines that is not on PATH."""
    for cmd in commands:
        if cmd and shutil.which(cmd[0]) is None:
            return cmd[0]
    return None


def add_cuda_objects(ext, build_temp: str) -> bool:  # noqa: ANN001 - a setuptools Extension
    """Compile the CUDA sources and add them, cudart_static and DBF_WITH_CUDA to
    ``ext``; False (and one line saying why) when the CPU part is built alone."""
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
        objs = compile_cuda_objects(nvcc, Path(build_temp) / "cuda")
    except (RuntimeError, OSError) as e:
        _say(f"CUDA compile failed, building the CPU part only: {e}")
        return False
    ext.extra_objects = list(ext.extra_objects or []) + objs
    ext.define_macros = list(ext.define_macros or []) + [("DBF_WITH_CUDA", "1")]
    ext.library_dirs = list(ext.library_dirs or []) + [str(libdir)]
    ext.libraries = list(ext.libraries or []) + ["cudart_static", "dl", "rt", "pthread"]
    return True


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
    includes = [pybind11.get_include(), str(HERE)]
    ext = Extension(
        EXT_NAME,
        # The copies of the CPU kernels are compiled by BuildExt (each with its
        # own flags, which an Extension cannot give per source) and linked as
        # extra objects after bindings.cpp.
        sources=[os.path.join(rel, BINDINGS_SOURCE)],
        include_dirs=includes,
        define_macros=[("DBF_SOURCE_HASH", f'"{source_hash()}"')],
        extra_compile_args=[*cpu_compile_args(), *bindings_args()],
        extra_link_args=["-fopenmp"],
        language="c++",
        # Optional: a failed build leaves the install without _C instead of
        # failing it (and `build_ext --inplace` then copies nothing).
        optional=True,
    )

    class BuildExt(build_ext):
        """Adds the CPU copies and the nvcc objects; never fails the install."""

        def build_extension(self, ext):  # noqa: ANN001 - setuptools signature
            missing = missing_executable([getattr(self.compiler, a, None) for a in
                                          ("compiler_so_cxx", "compiler_so", "linker_so_cxx", "linker_so")])
            if missing is not None:
                _say(no_compiler_message(missing))
                return
            try:
                self._add_cpu_copies(ext)
                with_cuda = add_cuda_objects(ext, self.build_temp)
                super().build_extension(ext)
            except Exception as e:  # compiler broken: install without _C
                _say(f"NOT built ({type(e).__name__}: {e}); the CPU C++ kernels will be "
                     "compiled at first use if a compiler works then, the CUDA path needs CuPy")
                return
            what = "CPU (OpenMP) kernels, " + "/".join(n for n, _ in cpu_copies()) + (
                " + CUDA kernels for " + ", ".join(gencode_flags()) if with_cuda else ""
            )
            _say(f"built {what}")

        def _add_cpu_copies(self, ext) -> None:  # noqa: ANN001
            objs_by_copy = []
            for name, target in cpu_copies():
                objs_by_copy.append(self.compiler.compile(
                    [os.path.join(rel, s) for s in CPU_KERNEL_SOURCES],
                    output_dir=os.path.join(self.build_temp, f"cpu_{name}"),
                    include_dirs=includes, debug=self.debug,
                    extra_postargs=[*cpu_compile_args(), "-fPIC", *copy_args(name, target)],
                    depends=[str(HERE / h) for h in sorted(os.listdir(HERE)) if h.endswith((".h", ".cuh"))],
                ))
            ext.extra_objects = link_objects_in_order(objs_by_copy) + list(ext.extra_objects or [])

    return [ext], {"build_ext": BuildExt}


def jit_module_name() -> str:
    """Module name of the run-time build (unique per source version, and per
    DAWNBENCH_MARCH: a -march build is another module than the portable one)."""
    if march():
        return f"_C_jit_{source_hash()}_march_{hashlib.sha256(march().encode()).hexdigest()[:8]}"
    return f"_C_jit_{source_hash()}"


def compiler() -> str:
    """The C++ compiler of the run-time build: ``$CXX``, else g++."""
    return os.environ.get("CXX", "g++")


class NoCompiler(RuntimeError):
    """No C++ compiler: the message is no_compiler_message's one line."""


def build_cpu_module(out_dir: Path, jobs: int | None = None) -> Path:
    """Run-time build of the CPU-only module (no setup.py involved): used when
    the installed ``_C`` is missing or older than the sources. Returns the path
    of the built shared object; raises NoCompiler (one line) without a
    compiler, RuntimeError with the compiler output when a compile fails."""
    import sysconfig

    import pybind11

    cxx = compiler()
    if shutil.which(cxx) is None:
        raise NoCompiler(no_compiler_message(cxx))
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    name = jit_module_name()
    target = out_dir / f"{name}{suffix}"
    includes = ["-I", pybind11.get_include(), "-I", sysconfig.get_paths()["include"], "-I", str(HERE)]
    common = [*cpu_compile_args(), "-fPIC", f'-DDBF_SOURCE_HASH="{source_hash()}"',
              f"-DDBF_MODULE_NAME={name}"]
    # (source, object, flags): bindings first, then each copy's sources.
    jobs_list = [(BINDINGS_SOURCE, out_dir / "bindings.o", [*common, *bindings_args()])]
    for copy, target_flags in cpu_copies():
        jobs_list += [(s, out_dir / f"{Path(s).stem}.{copy}.o", [*common, *copy_args(copy, target_flags)])
                      for s in CPU_KERNEL_SOURCES]

    def one(job: tuple[str, Path, list[str]]) -> str:
        src, obj, flags = job
        r = subprocess.run([cxx, *flags, *includes, "-c", str(HERE / src), "-o", str(obj)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{cxx} failed on {src}:\n{r.stderr[-4000:]}")
        return str(obj)

    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        objs = list(pool.map(one, jobs_list))  # in jobs_list's order: the link order
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    r = subprocess.run([cxx, "-shared", "-fopenmp", *objs, "-o", str(tmp)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"linking _C failed:\n{r.stderr[-4000:]}")
    os.replace(tmp, target)  # atomic: concurrent builders never see half a file
    return target
