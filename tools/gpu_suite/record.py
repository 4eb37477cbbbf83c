"""The GPU suite's record (gpu_suite/suite.py): suite.json and suite.log
in the output folder, each part's status and budget, and the subprocesses
whose output goes to logs/; the check that a GPU is there
(:func:`gpu_missing`) and what a stop signal does (:func:`stop_on_signals`).

suite.json is merged and rewritten atomically (temporary name, then rename)
after every measurement, so a reader never sees half a file and a command
stopped at its limit keeps what it finished; several commands with the same
folder fill the same file (docs/GPU_SUITE.md documents its keys).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Protocol

# Run from the repository root (``python -m``), the source tree's package is found before it is
# installed (the build part installs it); stopping.py needs only the standard library.
from dawnbench_fast.runner import stopping
from dawnbench_fast.runner.stopping import end_group  # one way to end a run's group

SCHEMA_VERSION = 1


class UsageError(ValueError):
    """A bad flag or path: one line on stderr, exit status 2."""


def comma_list(text: str, allowed: tuple[str, ...], flag: str, what: str) -> list[str]:
    """The names of a comma-separated flag (``--only``, ``--stages``), each one
    of ``allowed`` and at least one; else a :class:`UsageError` listing them."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names or set(names) - set(allowed):
        raise UsageError(f"{flag} {text}: {what} are {', '.join(allowed)}")
    return names


def add_trainer_args(p: argparse.ArgumentParser) -> None:
    """``--trainer-args ...``: the rest of the line, for every trainer command."""
    p.add_argument("--trainer-args", nargs=argparse.REMAINDER, default=[],
                   help="the rest of the line goes to every trainer command (last flag)")


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
            self.data = read_suite(self.path)
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

    def stopped(self, signum: int) -> None:
        """Record that a signal stopped the command: the part that was running
        is "stopped" (not "failed": nothing of its own went wrong), and the
        command's record names the signal, in one atomic rewrite of
        suite.json and a line of suite.log."""
        name = signal.Signals(signum).name
        reason = f"stopped by {name}; the runs it had started were ended"
        for part, rec in self.data["parts"].items():
            if rec.get("status") == "running":
                self.end(part, "stopped", reason)
        if self.data["commands"]:
            self.data["commands"][-1].update(stopped_by=name, stopped=now())
        self.save()
        self.log(f"stopped by {name}: no run it started is left going; exit status {128 + signum}")


def read_suite(path: Path) -> dict:
    """An existing suite.json, to be added to; a :class:`UsageError` naming the
    file when it is not one (damaged, or another file of that name), before
    anything is written, so that the file stays as it was for its owner."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        why = f"line {e.lineno}: {e.msg}" if isinstance(e, json.JSONDecodeError) else type(e).__name__
        data, problem = None, f"cannot be read as JSON ({why})"
    else:
        problem = "is not a suite record (no commands list and parts object)"
    if isinstance(data, dict) and isinstance(data.get("commands"), list) and \
            isinstance(data.get("parts"), dict):
        return data
    raise UsageError(f"--out {path.parent}: {path} {problem}; give a new --out, or move the file away "
                     "to start a new record there")


# -- the machine -----------------------------------------------------------------------------------


def gpu_missing(script: str) -> str | None:
    """Why ``script`` cannot measure here, in one line saying what is missing
    and what to do, or None when torch sees a CUDA device. Asked before
    anything is started or written: a timed command on a machine without a
    GPU would otherwise build the extension and train on the CPU for hours."""
    try:
        import torch
    except ImportError as e:
        return f"{script}: torch does not import ({e}), so no GPU can be used; install the package's " \
               "requirements (README), or add --dry-run"
    if torch.cuda.is_available():
        return None
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES") == ""
    why = "CUDA_VISIBLE_DEVICES is empty" if hidden else f"torch {torch.__version__} sees no CUDA device"
    return f"{script}: no GPU here ({why}); run it on a machine with an NVIDIA GPU, or add --dry-run " \
           "to go through it on the CPU at tiny sizes"


# -- stop signals ----------------------------------------------------------------------------------

# What ends the suite early: a scheduler's time limit (TERM), ^C (INT), a closed terminal (HUP).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Seconds a child has between TERM and KILL (the package's, which the study's runs are given too).
STOP_GRACE_S = stopping.STOP_GRACE_S


class Stopped(BaseException):
    """The suite received stop signal ``signum``. A BaseException, as
    KeyboardInterrupt is, so that a part's ``except Exception`` does not
    record it as that part's failure and go on with the next part."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


# The first stop signal received (None: none), and whether a child is being started: a signal
# then is raised only once the child is known, so that it is ended too (_raise_if_stopped).
_stop: dict = {"signum": None, "starting": False}


def _on_stop_signal(signum: int, frame: FrameType | None) -> None:
    if _stop["signum"] is not None:  # stopping already: the first signal's clean-up is running
        return
    _stop["signum"] = signum
    if not _stop["starting"]:
        raise Stopped(signum)


def _raise_if_stopped() -> None:
    if _stop["signum"] is not None:
        raise Stopped(_stop["signum"])


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """TERM, INT and HUP raise :class:`Stopped` while inside (the previous
    handlers put back after). The children of :func:`run_logged` run in
    sessions of their own (so that a stop at the budget ends what they
    started), where no signal sent to the suite's terminal or process group
    reaches them: on :class:`Stopped` run_logged ends its child's whole
    group before the exception goes on, so that nothing outlives the suite."""
    if threading.current_thread() is not threading.main_thread():  # no handlers elsewhere
        yield
        return
    _stop.update(signum=None, starting=False)
    previous = {s: signal.signal(s, _on_stop_signal) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


# -- subprocesses ---------------------------------------------------------------------------------


class Logs(Protocol):
    """Where :func:`run_logged` writes: a folder (``out``, whose ``logs/`` gets
    each child's output) and a log line for each command started. A
    :class:`Suite` is one; so is the measuring script's (measure.py), which
    starts the suite's own commands and must not hold a copy of suite.json."""

    out: Path

    def log(self, line: str) -> None: ...


def run_logged(suite: Logs, cmd: list[str], log_name: str, timeout: float, cwd: Path | None = None,
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
        _stop["starting"] = True  # a stop signal now is raised below, where the child is known
        try:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        finally:
            _stop["starting"] = False
        try:
            _raise_if_stopped()
            rc: int | None = proc.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            end_group(proc, grace=0)
            rc = None
        except BaseException:  # a stop signal (Stopped), or anything else: the child ends with the suite
            end_group(proc, grace=STOP_GRACE_S)
            raise
    return rc, time.monotonic() - t0, path


def tail(path: Path, lines: int = 3) -> str:
    text = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return " | ".join(text[-lines:])


