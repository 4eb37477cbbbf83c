"""What the GPU sweep scripts (sweep_bn_act.py, sweep_conv_group.py)
share: a configuration applied by patching module attributes, the one-line
refusal where a sweep cannot run, and the record written at the end."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from dawnbench_fast import atomic
from tools.gpu_suite.record import gpu_missing


@contextmanager
def patched(module, **values) -> Iterator[None]:
    """Set module attributes for the duration (the sweep's configuration)."""
    old = {k: getattr(module, k) for k in values}
    for k, v in values.items():
        setattr(module, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(module, k, v)


def refusal(script: str, dry_run: bool) -> str | None:
    """Why ``script`` cannot sweep here (one line), or None: a dry run needs
    Triton's interpreter set before triton is imported, a timed one a GPU."""
    if dry_run and os.environ.get("TRITON_INTERPRET") != "1":
        return (f"{script}: --dry-run needs TRITON_INTERPRET=1 set before triton is imported "
                "(run it as a script)")
    if not dry_run:
        return gpu_missing(script)  # the GPU suite's one line: what is missing, what to do
    return None


def write_record(out: Path, device: torch.device, batch: int, dry_run: bool, table: str, **fields) -> dict:
    """OUT/sweep.json (the device, batch and ``fields``) and OUT/sweep.md
    (``table``), each written atomically; the record."""
    out.mkdir(parents=True, exist_ok=True)
    record = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (dry run)",
              "batch": batch, "dry_run": dry_run, **fields}
    atomic.write_json(out / "sweep.json", record)
    atomic.write_text(out / "sweep.md", table)
    return record
