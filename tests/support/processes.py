"""Processes a test started and must see ended: the stop-signal tests of the
GPU suite and the studies check that no run they start outlives them."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def survivors(pids: Iterable[int], within_s: float = 10.0) -> list[int]:
    """The ``pids`` still running after ``within_s`` seconds (a reparented
    grandchild is reaped by init a moment after its parent's group ends)."""
    pids = list(pids)
    deadline = time.monotonic() + within_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def kill_all(pids: Iterable[int]) -> None:
    """SIGKILL each of ``pids`` that still exists: a failed test leaves nothing running."""
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
