"""The GPU suite's record (benchmarks/gpu_suite.py): suite.json and suite.log
in the output folder, each part's status and budget, and the subprocesses
whose output goes to logs/.

suite.json is merged and rewritten atomically (temporary name, then rename)
after every measurement, so a reader never sees half a file and a command
stopped at its limit keeps what it finished; several commands with the same
folder fill the same file (docs/GPU_SUITE.md documents its keys).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import time
from pathlib import Path

SCHEMA_VERSION = 1


class UsageError(ValueError):
    """A bad flag or path: one line on stderr, exit status 2."""


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Suite:
    """suite.json and suite.log in ``out``: every record is merged into the
    JSON and the file rewritten atomically (temporary name, then rename), so a
    reader never sees half a file and a killed command keeps what it wrote."""

    def __init__(self, out: Path, dry_run: bool, budget_s: float):
        self.out, self.dry_run, self.budget_s = out, dry_run, budget_s
        out.mkdir(parents=True, exist_ok=True)
        self.path, self.log_path = out / "suite.json", out / "suite.log"
        if self.path.exists():
            self.data = json.loads(self.path.read_text())
        else:
            self.data = {"schema_version": SCHEMA_VERSION, "commands": [], "parts": {}}
        self.part_started = time.monotonic()

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=False) + "\n")
        os.replace(tmp, self.path)

    def log(self, line: str) -> None:
        stamped = f"{now()} {line}"
        print(stamped, flush=True)
        with open(self.log_path, "a") as f:
            f.write(stamped + "\n")

    def part(self, name: str) -> dict:
        """The record of part ``name``, started afresh (status "running")."""
        self.part_started = time.monotonic()
        rec = {"status": "running", "started": now(), "dry_run": self.dry_run, "budget_s": self.budget_s}
        self.data["parts"][name] = rec
        self.save()
        self.log(f"[{name}] started (budget {self.budget_s:.0f} s)")
        return rec

    def left(self) -> float:
        """Seconds left of the current part's budget."""
        return self.budget_s - (time.monotonic() - self.part_started)

    def end(self, name: str, status: str = "done", reason: str | None = None) -> None:
        rec = self.data["parts"][name]
        rec.update(status=status, ended=now(), seconds=round(time.monotonic() - self.part_started, 1))
        if reason:
            rec["reason"] = reason
        self.save()
        self.log(f"[{name}] {status}" + (f": {reason}" if reason else "") + f" ({rec['seconds']} s)")


# -- subprocesses ---------------------------------------------------------------------------------


def run_logged(suite: Suite, cmd: list[str], log_name: str, timeout: float, cwd: Path | None = None,
               env: dict[str, str] | None = None) -> tuple[int | None, float, Path]:
    """Run ``cmd`` with its output in DIR/logs/``log_name``; (exit status or
    None when stopped at ``timeout``, wall seconds, the log's path)."""
    logs = suite.out / "logs"
    logs.mkdir(exist_ok=True)
    path = logs / log_name
    suite.log(f"$ {' '.join(cmd)}  (timeout {timeout:.0f} s, output: {path})")
    t0 = time.monotonic()
    with open(path, "w") as f:
        # a session of its own, so that a stop at the budget also ends what it started
        # (torch.compile's worker processes, the peer's autotuning)
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        try:
            rc: int | None = proc.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
    return rc, time.monotonic() - t0, path


def tail(path: Path, lines: int = 3) -> str:
    text = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return " | ".join(text[-lines:])


