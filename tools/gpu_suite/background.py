"""The measuring script's background command (measure.py ``--stages
build,warm``), started with ``setsid nohup`` in the first data command so
that the data's transfer time builds the extension and warms the compile
caches, and how the measuring command awaits it: our trainer's own warm-up
(``--warm-up-only --synthetic-data``) in each compile mode, a marker per
mode finished under the cache folder (carried on with the caches), the
background's pid in ``--work``, and the bounded wait that ends it before
any timed run (a compile beside a timed run would slow it).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from dawnbench_fast import atomic
from tools.gpu_suite import carry, plan
from tools.gpu_suite.record import Logs, now, tail
from tools.gpu_suite.training_parts import DRY_TRAINER_FLAGS

KEEP_S = 20.0  # kept back at the end of a command for the caches' tarball
MIN_STAGE_S = 20.0  # a stage with less than this left is skipped, not started
POLL_S = 2.0  # how often the measuring command looks for the background warm-up's markers
END_WAIT_S = 30.0  # the background's time to end its runs on TERM (its children get 10 s, then KILL)
BACKGROUND = "background.json"  # in --work: the background command's pid, so that it can be awaited


class Clock(Protocol):
    """What the plan reads time from (a fake one in tests)."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class Command(Logs, Protocol):
    """What the warm stage needs of the measuring script's record (measure.Measure)."""

    rec: dict
    clock: Clock
    run: Callable[..., tuple[int | None, float, Path]]

    def left(self) -> float: ...

    def save(self) -> None: ...


def marker_path(cache: Path, mode: str) -> Path:
    return cache / plan.WARMED_DIR / f"{carry.slug(mode)}.json"


def write_marker(m: Command, mode: str, by: str, record: dict | None = None) -> None:
    """The caches in W/cache are warm for ``mode``: said in a file carried with them."""
    rec = record or {}
    atomic.write_json(marker_path(m.out / "cache", mode), {
        "mode": mode, "by": by, "made": now(), "machine": m.rec.get("machine"),
        "commit": (m.rec.get("git") or {}).get("sha"), "warmup_s": rec.get("warmup_s"),
        "compile_mode": rec.get("compile_mode"), "capture_failed": plan.capture_failed(rec)})


def warm_command(args: argparse.Namespace, mode: str, record: Path) -> list[str]:
    """Our trainer's warm-up alone on random images of CIFAR-10's shapes, with
    the flags the measured runs get (same flags, same graphs, same cache keys)."""
    cmd = [sys.executable, "-m", "dawnbench_fast.cifar", "--warm-up-only", str(record), "--synthetic-data",
           "--seed", str(args.seed), "--out", str(record.parent / "out"), "--no-progress"]
    cmd += DRY_TRAINER_FLAGS if args.dry_run else []
    cmd += list(args.trainer_args)
    return cmd + ([] if plan.given_mode(args.trainer_args) else ["--set", f"compile_mode={mode}"])


def run_warm(m: Command, args: argparse.Namespace) -> dict:
    """The ``warm`` stage: the warm-up in each mode in turn (``default``
    first: it is the one a cold machine falls back on), a marker per mode
    finished, all within ``--warm-budget``."""
    given = plan.given_mode(args.trainer_args)
    budget = min(args.warm_budget, m.left() - KEEP_S)
    entry: dict = {"stage": "warm", "budget_s": round(budget, 1), "asked_s": args.warm_budget,
                   "started": now(), "modes": []}
    m.rec["stages"].append(entry)
    t0 = m.clock.monotonic()
    for mode in [given] if given else plan.WARM_MODES:
        left = budget - (m.clock.monotonic() - t0)
        rec: dict = {"mode": mode}
        entry["modes"].append(rec)
        if left < MIN_STAGE_S:
            rec.update(status="skipped", reason=f"{max(left, 0):.0f} s left of --warm-budget")
            continue
        record = m.out / "warm" / f"{carry.slug(mode)}.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.unlink(missing_ok=True)
        rc, seconds, log = m.run(m, warm_command(args, mode, record), f"warm_{carry.slug(mode)}.log", left)
        rec.update(exit_status=rc, seconds=round(seconds, 1))
        if rc == 0 and record.is_file():
            done = plan.read_run_json(record)
            rec.update(status="done", warmup_s=done.get("warmup_s"), capture_failed=plan.capture_failed(done))
            write_marker(m, mode, "a warm-up ahead of time on this machine", done)
        else:
            rec.update(status="stopped at the budget" if rc is None else "failed", reason=tail(log))
        m.log(f"warm {mode}: {rec['status']} in {seconds:.0f} s")
        m.save()
    statuses = {r["status"] for r in entry["modes"]}
    entry.update(seconds=round(m.clock.monotonic() - t0, 1),
                 status="done" if statuses <= {"done"} else "partial" if "done" in statuses else "failed")
    m.save()
    return entry


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def end_background(pid: int, clock: Clock) -> str:
    """TERM the background command (it ends the runs it started, then
    records the stop), then KILL its group if it outlives END_WAIT_S."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return "had ended"
    t0 = clock.monotonic()
    while pid_alive(pid) and clock.monotonic() - t0 < END_WAIT_S:
        clock.sleep(0.5)
    if not pid_alive(pid):
        return "ended by TERM"
    try:
        os.killpg(pid, signal.SIGKILL)  # setsid made it the leader of its own group
    except (ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    return f"killed after {END_WAIT_S:.0f} s"


def await_background(work: Path, wait_s: float, clock: Clock,
                     modes: tuple[str, ...] = plan.WARM_MODES) -> dict:
    """Await the background command (``--stages build,warm``) until a marker
    for each of ``modes`` is there, it has ended, or ``wait_s`` has passed;
    then end it where it still runs: no timed run shares the GPU with a
    compile. Before the measuring command's own record is made (the
    background writes the same suite.json)."""
    path = work / BACKGROUND
    if not path.is_file():
        return {"found": False}
    bg = plan.read_run_json(path)
    pid = bg.get("pid")
    rec: dict = {"found": True, "pid": pid, "started": bg.get("started"), "wait_s": wait_s}
    t0 = clock.monotonic()

    def running() -> bool:
        return isinstance(pid, int) and "ended" not in plan.read_run_json(path) and pid_alive(pid)

    def warmed() -> bool:
        return all(marker_path(work / "cache", mode).is_file() for mode in modes)

    while running() and not warmed() and clock.monotonic() - t0 < wait_s:
        clock.sleep(POLL_S)
    rec["waited_s"] = round(clock.monotonic() - t0, 1)
    rec["ended"] = end_background(pid, clock) if running() else "had ended"
    rec["modes_warmed"] = [mode for mode in modes if marker_path(work / "cache", mode).is_file()]
    return rec
