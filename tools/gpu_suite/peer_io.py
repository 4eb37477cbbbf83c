"""The files the GPU suite (gpu_suite/suite.py) reads and writes around
its subprocesses: the published script's data and console table, the
roofline report's summary, and Nsight Compute's CSV inside its log.

The published airbench94_muon.py reads ``cifar10/train.pt`` and
``cifar10/test.pt`` under its working directory (``{"images": uint8 NHWC,
"labels": int64, "classes": names}``, what torchvision's loader gave it) and
prints one table row per epoch and run, ``| run | epoch | train_acc | val_acc
| tta_val_acc | time_seconds |``; the row whose epoch is ``eval`` closes a
run with its accuracy after test-time augmentation and its clock (whitening
init + training + the final evaluation). Nothing of that script is copied
here: this module only makes its input and reads its output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

STANDIN = Path(__file__).resolve().with_name("peer_standin.py")
TINY_TRAIN, TINY_TEST = 512, 256  # images in a dry run's peer files


def prepare_workdir(script: Path, folder: Path, data_dir: str | None, tiny: bool) -> Path:
    """The folder to run the peer script in: its own, if ``cifar10/train.pt``
    and ``test.pt`` lie beside it (as the published set-up has them), else
    ``folder/work`` with those files made from our reader of CIFAR-10
    (``data_dir``, else the trainer's lookup: $DAWNBENCH_DATA, the cache)."""
    if all((script.parent / "cifar10" / f).is_file() for f in ("train.pt", "test.pt")) and not tiny:
        return script.parent
    import torch

    from dawnbench_fast.data.cifar10 import CLASSES, load_cifar10

    work = folder / "work"
    (work / "cifar10").mkdir(parents=True, exist_ok=True)
    ds = load_cifar10(data_dir, allow_download=True)
    n_train, n_test = (TINY_TRAIN, TINY_TEST) if tiny else (len(ds.train_labels), len(ds.test_labels))
    for name, images, labels, n in (("train", ds.train_images, ds.train_labels, n_train),
                                    ("test", ds.test_images, ds.test_labels, n_test)):
        torch.save({"images": torch.from_numpy(images[:n].copy()),
                    "labels": torch.from_numpy(labels[:n].astype("int64")), "classes": list(CLASSES)},
                   work / "cifar10" / f"{name}.pt")
    return work


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_output(text: str) -> dict:
    """The peer's runs from its console table: ``{"runs": [{"run", "tta_val_acc",
    "time_seconds"}], "warmup": the warm-up run's row or None, "mean_line"}``.
    A run's label is printed on its first row only; the warm-up run (its
    compilation, on dummy labels) is kept apart from the timed runs."""
    header: list[str] | None = None
    current = None
    runs, warmup = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = _cells(line)
        if "tta_val_acc" in cells and "time_seconds" in cells:
            header = cells
            continue
        if header is None or len(cells) != len(header):
            continue
        row = dict(zip(header, cells, strict=True))
        if row.get("run"):
            current = row["run"]
        if row.get("epoch") != "eval":
            continue
        try:
            entry = {"run": current, "tta_val_acc": float(row["tta_val_acc"]),
                     "time_seconds": float(row["time_seconds"])}
        except ValueError:
            continue
        if current == "warmup":
            warmup = entry
        else:
            runs.append(entry)
    mean = re.search(r"^Mean:.*$", text, re.MULTILINE)
    return {"runs": runs, "warmup": warmup, "mean_line": mean.group(0) if mean else None}


def roofline_summary(report_json: Path, top: int = 10) -> dict:
    """The step's totals against the device's peaks, its top ops and kernels."""
    rep = json.loads(report_json.read_text())
    totals = rep.get("totals", {})
    keep = ("op_time_per_step_us", "wall_time_per_step_us", "flops_per_step", "main_precision",
            "main_peak_flops_per_s", "fraction_of_peak", "matmul_conv_fraction_of_peak",
            "wall_fraction_of_peak", "bandwidth_bytes_per_s", "coverage")
    rows = sorted(rep.get("rows", []), key=lambda r: -r.get("time_us", 0.0))[:top]
    return {
        "peaks": rep.get("device", {}).get("name"), "time_basis": rep.get("time_basis"),
        "totals": {k: totals.get(k) for k in keep},
        "top_ops": [{k: r.get(k) for k in ("op", "shapes", "calls", "time_us", "share", "pct_of_roof",
                                           "bound")} for r in rows],
        "top_kernels": [k["kernel"] for k in rep.get("kernels", [])[:top]],
        "warnings": rep.get("warnings", []),
    }


def csv_part(log: str) -> str:
    """Nsight Compute's CSV out of a log that also holds the program's own
    output: the lines from the first that starts with ``"ID"`` on, CSV rows only."""
    lines = log.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return ""
    return "\n".join(ln for ln in lines[start:] if ln.startswith('"')) + "\n"
