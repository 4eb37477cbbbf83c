"""What the measuring script (measure.py) carries in and sends back: the
compile caches of the previous run on the same GPU kind and torch version,
restored before anything compiles; and, after each stage, the files that
matter packed into the output folder, the only way results leave a GPU
machine without network reached by a command runner that returns a few files.

What comes back is limited: at most 8 flat files, each under 16 MiB
(measure.py's ``--max-files`` and ``--max-file-mib``). So the files go flat
into one folder, each written under a temporary name and
renamed (a command killed at its limit leaves whole files): suite.json,
suite.log, and three gzipped tarballs of the output folder (the logs, our
runs' records, the profile); then the caches, named for the GPU and torch
version that made them, to be carried the next time.
"""

from __future__ import annotations

import re
import shutil
import tarfile
from collections.abc import Callable, Iterable
from pathlib import Path

from dawnbench_fast import atomic

MAX_FILES = 8
MAX_FILE_BYTES = 16 * 2**20
# Files of the runs that are not worth their bytes coming back: checkpoints, CIFAR-10 as tensors.
HEAVY = ("*.pt", "*.pth", "*.ckpt")
TRACES = ("trace*.json", "trace*.json.gz")  # a profile's raw trace: dropped first if the profile is too big


def slug(text: str) -> str:
    """``text`` in the letters a returned file's name may use (lower case,
    digits, '.', '-'): "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9.]+", "-", text.lower())).strip("-")


def cache_name(gpu: str | None, torch_version: str | None) -> str:
    """The caches' tarball for this GPU model and torch version: a cache is
    only worth restoring where both match (Inductor keys its entries on them)."""
    return f"inductor-{slug(gpu or 'cpu')}-torch{slug(torch_version or 'unknown')}.tar.gz"


def restore_cache(source: Path, name: str, folder: Path) -> dict:
    """Unpack ``source``/``name`` (a folder of carried caches) into ``folder``;
    the record says whether it was there and what it held."""
    tarball = source / name
    if not tarball.is_file():
        others = sorted(p.name for p in source.glob("inductor-*.tar.gz")) if source.is_dir() else []
        why = f"no {name} in {source}" + (f" (there: {', '.join(others)})" if others else "")
        return {"name": name, "restored": False, "reason": why}
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(tarball) as tar:
            members = tar.getmembers()
            # the "data" filter (Python 3.12, backported): no absolute paths, links out or devices
            if hasattr(tarfile, "data_filter"):
                tar.extractall(folder, filter="data")
            else:  # pragma: no cover - older Pythons
                tar.extractall(folder)
    except (tarfile.TarError, OSError) as e:  # a damaged carry costs a cold compile, not the run
        return {"name": name, "restored": False, "reason": f"{tarball}: {type(e).__name__}: {e}"}
    return {"name": name, "restored": True, "from": str(tarball), "bytes": tarball.stat().st_size,
            "entries": len(members)}


def _excluded(path: Path, patterns: Iterable[str]) -> bool:
    return any(path.match(p) for p in patterns)


def tar_gz(dest: Path, root: Path, sources: Iterable[Path], exclude: Iterable[str] = ()) -> int:
    """Write ``dest``: a gzipped tar of the files under ``sources`` (names
    relative to ``root``), leaving out those matching ``exclude``; its size."""
    exclude = tuple(exclude)
    with atomic.atomic_path(dest) as tmp:
        with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
            for src in sources:
                files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
                for f in files:
                    if not _excluded(f, exclude):
                        tar.add(f, arcname=str(f.relative_to(root)))
        tmp.chmod(0o644)  # a temporary file is private; what comes back is for reading
    return dest.stat().st_size


def copy_file(src: Path, dest: Path) -> int:
    with atomic.atomic_path(dest) as tmp:
        shutil.copyfile(src, tmp)
        tmp.chmod(0o644)
    return dest.stat().st_size


def pack_fitting(dest: Path, attempts: list[Callable[[], int]], max_bytes: int | None = None) -> dict:
    """Try each way of writing ``dest`` in turn until one fits a returned
    file's size (``max_bytes``, default :data:`MAX_FILE_BYTES`); the record
    names the attempt taken, or why none fitted (the file removed)."""
    limit = max_bytes or MAX_FILE_BYTES
    size = 0
    for i, attempt in enumerate(attempts):
        size = attempt()
        if size <= limit:
            return {"bytes": size, "attempt": i}
    dest.unlink(missing_ok=True)
    return {"bytes": None, "reason": f"{size / 2**20:.1f} MiB even at its smallest: over the "
                                     f"{limit / 2**20:g} MiB a file can come back"}


def send_back(work: Path, dest: Path, max_bytes: int | None = None) -> dict[str, dict]:
    """Copy suite.json and suite.log and pack the logs, our runs' records and
    the profile from ``work`` into ``dest``; {file name: its record}."""
    dest.mkdir(parents=True, exist_ok=True)
    out: dict[str, dict] = {}
    for name in ("suite.json", "suite.log"):
        if (work / name).is_file():
            out[name] = pack_fitting(dest / name, [lambda n=name: copy_file(work / n, dest / n)], max_bytes)
    runs = [p for p in (work / "trainer", *sorted((work / "peer").glob("ours_block*"))) if p.is_dir()]
    parts = {"logs.tar.gz": ([work / "logs"], [HEAVY]),
             "runs.tar.gz": (runs, [HEAVY]),
             "profile.tar.gz": ([work / "roofline"], [HEAVY, HEAVY + TRACES])}
    for name, (sources, excludes) in parts.items():
        present = [s for s in sources if s.exists()]
        if present:
            out[name] = pack_fitting(dest / name, [lambda s=present, e=e, n=name: tar_gz(dest / n, work, s, e)
                                                   for e in excludes], max_bytes)
    return out


def send_cache(folder: Path, dest: Path, name: str, max_bytes: int | None = None) -> dict:
    """The caches in ``folder`` as ``dest``/``name``: all of them, else
    Inductor's alone (its graphs and autotuning choices; Triton then compiles
    the kernels again, which is the smaller part of a warm-up), else nothing."""
    if not folder.is_dir():
        return {"name": name, "bytes": None, "reason": f"no cache folder {folder}"}
    target = dest / name
    everything = sorted(folder.iterdir())
    inductor = [p for p in everything if p.name != "triton"]
    rec = pack_fitting(target, [lambda: tar_gz(target, folder, everything),
                                lambda: tar_gz(target, folder, inductor)], max_bytes)
    if rec.get("attempt") == 1:
        rec["left_out"] = "triton (the whole did not fit)"
    return {"name": name, **rec}
