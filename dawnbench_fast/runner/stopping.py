"""How a run stops early and says how to go on.

SIGTERM treated as Ctrl-C. Slurm, Kubernetes and most schedulers send
SIGTERM before they kill a job (Slurm at the time limit or on scancel,
Kubernetes on eviction, with a grace period); Python's default for it is to
die on the spot without a word. Raised as :class:`Terminated`, a
KeyboardInterrupt, it takes the Ctrl-C path: the atomic writes leave the last
checkpoint whole, the seed driver says how to go on with ``--resume``, and
the process exits 143 (128 + 15, what a shell reports for a SIGTERM death),
so schedulers still see a terminated job.

:func:`resume_hint` is what a run stopped by either signal, or by a disk
that refused a result (atomic.WriteFailed), says: which checkpoint holds its
work and the command that goes on from it.

:func:`end_group` ends a child started in a session of its own (a study's
training runs, the GPU suite's runs): no signal sent to this process reaches
such a child, so a command stopped early must end it itself, or it trains on
for hours after the command has gone.

:func:`catch_stops_from_start_up` and :func:`run_main` cover the moments no
command's handler does: the second or two in which torch and the package are
imported, and the interpreter's exit after the command returned. Each
``__main__.py`` calls the first before its heavy imports (this module
imports only the standard library, so it is cheap to import first); a stop
signal then is one line and the exit status, never a traceback (INT) or a
silent death (TERM). No child has been started then: those a command starts
are ended by the command's own handlers.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

TERMINATED_STATUS = 128 + signal.SIGTERM  # 143
# Seconds a child has between TERM and KILL: a trainer keeps its last checkpoint and says how to
# resume on TERM (above); schedulers allow about as long before their KILL.
STOP_GRACE_S = 10.0
INTERRUPTED_STATUS = 128 + signal.SIGINT  # 130


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the main thread while inside;
    the previous handler is put back after. Elsewhere than the main thread
    (where Python allows no handler) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def resume_command(entry: str, out: Path, argv: list[str] | None = None) -> str:
    """``python -m ENTRY <this command's flags> --resume OUT`` when this
    process is that module's command line (``argv``: sys.argv); else (a
    torchrun job, a caller's own script) the words for it."""
    argv = sys.argv if argv is None else argv
    started = Path(argv[0]) if argv else Path()
    if started.name != "__main__.py" and not started.name.startswith("dawnbench-"):
        return f"the same command plus --resume {shlex.quote(str(out))}"
    flags, skip = [], False
    for word in argv[1:]:  # an earlier --resume (this run was resumed already) gives way
        if skip or word.startswith("--resume="):
            skip = False
            continue
        if word == "--resume":
            skip = True
            continue
        flags.append(word)
    return shlex.join(["python", "-m", entry, *flags, "--resume", str(out)])


def resume_hint(checkpoint: Path, out: Path, entry: str) -> str:
    """Where the run's work is kept and how to go on with it."""
    if not checkpoint.exists():
        from dawnbench_fast.runner import claim  # not at the top: this module imports only the stdlib

        again = " with --overwrite" if claim.holds_files(out) else ""
        return f"no epoch had finished (no checkpoint to go on from): start the command again{again}"
    return f"{checkpoint} holds the last finished epoch; go on with: {resume_command(entry, out)}"


def end_group(proc: subprocess.Popen, grace: float) -> None:
    """End the process group ``proc`` leads (it was started with
    ``start_new_session=True``): TERM, up to ``grace`` seconds for it to exit,
    then KILL for whatever of the group is left (the leader, or workers it
    started, e.g. torch.compile's, DataLoader's); ``grace`` 0 kills at once.
    Returns once the leader is reaped. A second stop signal during the grace
    (raised here as Terminated or KeyboardInterrupt) kills at once and goes on."""
    def signal_group(sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):  # the whole group has exited already
            pass
    try:
        if grace > 0:
            signal_group(signal.SIGTERM)
            proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    finally:  # the KILL whatever happened during the grace, so that nothing outlives the caller
        signal_group(signal.SIGKILL)
        proc.wait()


# Where the process is, for a stop signal outside the command's own handlers: "start-up" (importing),
# "command" (main() runs: signals raise, the command's handlers decide), "exit" (main() returned).
_phase = {"prog": "", "state": "command"}
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _on_stop(signum: int, frame: FrameType | None) -> None:
    if _phase["state"] == "command":  # what Python does for INT, and guarded() for TERM
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
    _exit_now(signum, f"during {_phase['state']}" if _phase["state"] == "start-up" else "while exiting")


def _exit_now(signum: int, when: str) -> None:
    # os._exit: a half-done import has nothing worth unwinding, and raising would print its
    # traceback. What the streams hold is flushed first where they allow it (a signal that lands
    # inside a write finds the buffer locked); the line goes straight to fd 2 for the same reason.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, RuntimeError, ValueError, AttributeError):
            pass
    line = f"{_phase['prog']}: stopped by {signal.Signals(signum).name} {when}\n"
    try:
        os.write(2, line.encode(errors="replace"))
    finally:
        os._exit(128 + signum)


def catch_stops_from_start_up(prog: str) -> None:
    """The first call of a command's ``__main__.py``, before torch is imported:
    from here on INT and TERM end the process with ``prog: stopped by SIGINT
    during start-up`` and status 130 (143 for TERM) until :func:`run_main`
    hands them to the command. A signal the process was started with ignored
    (``nohup``, a shell's background job) stays ignored, as Python leaves it."""
    if threading.current_thread() is not threading.main_thread():
        return
    _phase.update(prog=prog, state="start-up")
    for s in STOP_SIGNALS:
        if signal.getsignal(s) is not signal.SIG_IGN:
            signal.signal(s, _on_stop)


def run_main(main: Callable[[], int]) -> int:
    """Run the command's ``main`` with INT and TERM raising (KeyboardInterrupt,
    :class:`Terminated`) as its handlers expect; one that escapes them (a stop
    before they were installed) is one line and 130 or 143 here. Once ``main``
    returns, a stop during the interpreter's exit is one line and 130 or 143."""
    # The handler stays; only the phase it reads changes, in one assignment: putting Python's own
    # back and ours again after would leave instants between the calls where neither answers.
    _phase["state"] = "command"
    try:
        try:
            return main()
        finally:  # a signal from here on exits at once: nothing raises past this function
            _phase["state"] = "exit"
    except KeyboardInterrupt as e:
        name = "SIGTERM" if isinstance(e, Terminated) else "SIGINT"
        sys.stderr.write(f"{_phase['prog']}: stopped by {name}\n")
        return TERMINATED_STATUS if isinstance(e, Terminated) else INTERRUPTED_STATUS
