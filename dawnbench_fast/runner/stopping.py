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
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
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
        again = " with --overwrite" if out.is_dir() and any(out.iterdir()) else ""
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
