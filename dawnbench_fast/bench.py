"""DAWNBench metrics and reports: time-to-accuracy, training cost, one-image
inference latency and cost, the per-epoch TSV, the submission JSONs and a
run.json with everything that makes the run reproducible.

All files are written atomically (temporary name in the same folder, then
rename), so a killed run never leaves a half-written report.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path

import torch

from dawnbench_fast.train import EpochRow

CODE_URL = "https://github.com/dawnbench-fast/dawnbench_fast"


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` on success."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: Path, obj: object) -> None:
    write_text(path, json.dumps(obj, indent=2, default=str) + "\n")


# ---------------------------------------------------------------------------
# Latency
# ---------------------------------------------------------------------------


@torch.no_grad()
def one_image_latency(
    predict, images: torch.Tensor, n: int, device: torch.device
) -> tuple[float, int]:
    """DAWNBench inference latency: classify ``n`` images one at a time;
    returns (mean milliseconds per image, images timed). Every prediction is
    read back to the host, as a serving loop would."""
    n = min(n, len(images))
    predict(images[:1]).argmax(1).item()  # first-call costs stay out
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for i in range(n):
        predict(images[i : i + 1]).argmax(1).item()
    return (time.perf_counter() - t0) * 1000.0 / n, n


# ---------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------


def git_revision() -> dict[str, object]:
    here = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here, capture_output=True, text=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"sha": None, "dirty": None}
    return {"sha": sha or None, "dirty": bool(dirty) if sha else None}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware_description(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()}, {torch.get_num_threads()} threads"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")


def environment(device: torch.device) -> dict[str, object]:
    from dawnbench_fast import __version__

    versions = {"dawnbench_fast": __version__, "python": platform.python_version(),
                "torch": torch.__version__}
    for mod in ("triton", "numba", "numpy"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            versions[mod] = None
    return {
        "git": git_revision(),
        "versions": versions,
        "device": str(device),
        "hardware": hardware_description(device),
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "command": [sys.executable, "-m", "dawnbench_fast.cifar", *sys.argv[1:]],
        "platform": platform.platform(),
    }


# ---------------------------------------------------------------------------
# DAWNBench files
# ---------------------------------------------------------------------------


def tsv_text(rows: list[EpochRow], top5: bool = False) -> str:
    """epoch<TAB>hours<TAB>top1Accuracy[<TAB>top5Accuracy], accuracies in %."""
    head = "epoch\thours\ttop1Accuracy" + ("\ttop5Accuracy" if top5 else "")
    lines = [head]
    for r in rows:
        line = f"{r.epoch}\t{r.hours:.6f}\t{100 * r.top1:.2f}"
        if top5:
            line += f"\t{100 * (r.top5 or 0.0):.2f}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def submission_names(author: str, model: str, hardware_tag: str, framework: str) -> str:
    """DAWNBench file stem: [author]_[model]_[hardware tag]_[framework]."""
    return "_".join(slug(p) for p in (author, model, hardware_tag, framework))


def train_json(*, author: str, email: str, model: str, hardware: str, cost_per_hour: float | None,
               log_filename: str, misc: dict) -> dict:
    return {
        "version": "v1.0",
        "author": author,
        "authorEmail": email,
        "framework": f"PyTorch {torch.__version__}",
        "codeURL": CODE_URL,
        "model": model,
        "hardware": hardware,
        "costPerHour": cost_per_hour,
        "timestamp": date.today().isoformat(),
        "logFilename": log_filename,
        "misc": misc,
    }


def inference_json(base: dict, latency_ms: float, top1: float, cost_per_hour: float | None) -> dict:
    out = dict(base)
    out.pop("logFilename", None)
    out["latency"] = latency_ms
    out["cost"] = None if cost_per_hour is None else cost_per_hour * latency_ms / 3.6e6
    out["top1Accuracy"] = round(100 * top1, 2)
    return out


# ---------------------------------------------------------------------------
# Summaries
# ---------------------------------------------------------------------------


def mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain aligned text table."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*headers), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r) for r in rows]
    return "\n".join(lines)


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "not reached"
    return f"{s:.1f} s" if s < 120 else f"{s:.1f} s ({s / 60:.2f} min)"


def fmt_cost(usd: float | None) -> str:
    return "n/a (pass --cost-per-hour)" if usd is None else f"${usd:.4f}"
