"""Loads ``dawnbench_fast._C``: the installed build when it matches the
sources in this folder, else a CPU-only build made at run time (cached in the
per-user cache, ``dawnbench_fast.machine.user_cache_dir``), so the C++ kernels work
after an edit of csrc/ without re-running ``pip install -e .``.
"""

from __future__ import annotations

import fcntl
import importlib
import importlib.util
import sys
import warnings
from functools import cache
from pathlib import Path
from types import ModuleType

from dawnbench_fast.csrc.build import HERE, build_cpu_module, jit_module_name, source_hash
from dawnbench_fast.machine import user_cache_dir

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


@cache
def load() -> ModuleType:
    """The C++ module, building the CPU part here if needed.

    Raises NativeUnavailable (one line) when no build is possible."""
    want = source_hash(HERE)
    mod = _import_installed()
    if mod is not None and getattr(mod, "source_hash", "") == want:
        return mod
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
        built = sorted(out.glob(f"{jit_module_name()}*.so"))
        if not built:
            try:
                built = [build_cpu_module(out)]
            except (RuntimeError, OSError, ImportError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise NativeUnavailable(
                    f"dawnbench_fast._C is not installed and building it failed ({first}); "
                    "install a C++ compiler and pybind11, then `pip install -e .`"
                ) from e
    return _load_file(built[0])


def unavailable_reason() -> str | None:
    """None if the module loads, else why not (one line)."""
    try:
        load()
    except NativeUnavailable as e:
        return str(e)
    return None
