"""Loads ``dawnbench_fast._C``: the installed build when it matches the
sources in this folder, else a CPU-only build made at run time (cached in the
per-user cache, ``dawnbench_fast.hardware.machine.user_cache_dir``), so the C++ kernels work
after an edit of csrc/ without re-running ``pip install -e .``.
"""

from __future__ import annotations

import fcntl
import importlib
import importlib.util
import sys
import sysconfig
import warnings
from functools import cache
from pathlib import Path
from types import ModuleType

from dawnbench_fast.csrc.build import HERE, NoCompiler, build_cpu_module, jit_module_name, source_hash
from dawnbench_fast.hardware.machine import user_cache_dir

MODULE_NAME = "dawnbench_fast._C"


class NativeUnavailable(RuntimeError):
    """The C++ module could neither be imported nor built here."""


def cache_dir() -> Path:
    return user_cache_dir() / f"csrc-{source_hash(HERE)}"


def _import_installed() -> ModuleType | None:
    try:
        return importlib.import_module(MODULE_NAME)
    except ImportError:
        return None


def _load_file(path: Path) -> ModuleType:
    name = f"dawnbench_fast.{jit_module_name()}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise NativeUnavailable(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules[name] = mod
    return mod


def _checked(mod: ModuleType) -> ModuleType:
    """The module, after saying why DAWNBENCH_CPU_PATH was not followed (if so)."""
    note = getattr(mod, "cpu_path_note", "")
    if note:
        warnings.warn(f"dawnbench_fast._C: {note}", stacklevel=3)
    return mod


# Set once no compiler was found: the one-line message is printed once per
# process, and later calls raise at once instead of looking again.
_no_compiler: str | None = None


@cache
def load() -> ModuleType:
    """The C++ module, building the CPU part here if needed.

    Raises NativeUnavailable (one line) when no build is possible; without a
    C++ compiler that line is also printed (once), since ``--kernels auto``
    then quietly takes torch's kernels."""
    global _no_compiler
    if _no_compiler is not None:
        raise NativeUnavailable(_no_compiler)
    want = source_hash(HERE)
    mod = _import_installed()
    if mod is not None and getattr(mod, "source_hash", "") == want:
        return _checked(mod)
    if mod is not None:
        warnings.warn(
            "dawnbench_fast._C is older than the csrc/ sources; using a CPU-only build made "
            "now (re-run `pip install -e .` to rebuild the CUDA part too)",
            stacklevel=2,
        )
    out = cache_dir()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "build.lock", "w") as lock:  # one builder at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        # The exact file: a glob on the name would also match a DAWNBENCH_MARCH build's.
        path = out / f"{jit_module_name()}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
        built = [path] if path.exists() else []
        if not built:
            try:
                built = [build_cpu_module(out)]
            except NoCompiler as e:
                _no_compiler = f"dawnbench_fast: {e}"
                print(_no_compiler, file=sys.stderr, flush=True)
                raise NativeUnavailable(_no_compiler) from None
            except (RuntimeError, OSError, ImportError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise NativeUnavailable(
                    f"dawnbench_fast._C is not installed and building it failed ({first}); "
                    "install a C++ compiler and pybind11, then `pip install -e .`"
                ) from e
    return _checked(_load_file(built[0]))


def unavailable_reason() -> str | None:
    """None if the module loads, else why not (one line)."""
    try:
        load()
    except NativeUnavailable as e:
        return str(e)
    return None
