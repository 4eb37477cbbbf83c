"""A stop signal in a command's first second, while torch and the package
import: one line on stderr, no traceback, exit 130 (INT) or 143 (TERM).

Each command is started for real (``python -m ...``) and sent the signal at a
few instants counted from the moment its ``__main__.py`` began to run. That
moment is read from /proc, with no clock: the first time the process catches
SIGTERM (its start-up handler is installed) or has mapped torch's library
(the heavy imports began), whichever is seen first. The interpreter's own
start before that (the ``site`` imports, some tens of milliseconds) runs no
code of the package and is not tested. The last instants may land after the
imports, where the command's own handlers answer (their line, the same
status), or after the command ended on its own (the data folder named here
does not exist: exit 2 and its one-line error); each case is still one line
and no traceback.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")


def _started(pid: int) -> bool:
    """Whether the command's own code has begun (see the module's docstring)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = next(int(x.split()[1], 16) for x in status.splitlines() if x.startswith("SigCgt:"))
        return bool(caught >> (signal.SIGTERM - 1) & 1) or "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True  # it has exited already: send the signal and read what it said


def _stopped_at(argv: list[str], sig: signal.Signals, delay: float) -> tuple[int, list[str]]:
    """Start ``python -m ARGV``, send ``sig`` ``delay`` s after it began; (status, stderr's lines)."""
    proc = subprocess.Popen([sys.executable, "-m", *argv], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _started(proc.pid):
            assert time.monotonic() < deadline, "the command did not start in 60 s"
            time.sleep(0.001)
        time.sleep(delay)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, err.splitlines()


def _cifar(tmp: Path) -> list[str]:
    return ["dawnbench_fast.cifar", "--data-dir", str(tmp / "no-data"), "--no-download", "--out",
            str(tmp / "out")]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_a_stop_while_the_trainer_starts_is_one_line_and_its_status(tmp_path, sig):
    prog = "python -m dawnbench_fast.cifar"
    status = 128 + sig
    for k, delay in enumerate((0.0, 0.05, 0.3, 0.8, 2.0)):
        code, lines = _stopped_at(_cifar(tmp_path), sig, delay)
        said = f"at +{delay} s: status {code}, stderr {lines}"
        assert len(lines) == 1 and "Traceback" not in lines[0], said
        ours = {f"{prog}: stopped by {sig.name} during start-up",
                f"{prog}: {'interrupted' if sig == signal.SIGINT else 'terminated (SIGTERM)'}"}
        if k == 0:  # the instant its first line ran: before torch, in start-up
            assert (code, lines[0]) == (status, f"{prog}: stopped by {sig.name} during start-up"), said
        elif lines[0].startswith(f"{prog}: error: --data-dir "):
            # it ran to its own end (the missing data folder) before the signal: exit 2, or the
            # signal's status where it landed in the interpreter's last teardown, after the line
            assert code in (2, status, -sig), said
        else:
            assert code == status and lines[0] in ours, said
        assert not (tmp_path / "out").exists(), said  # nothing written


@pytest.mark.parametrize(("argv", "prog"), [
    (["dawnbench_fast"], "python -m dawnbench_fast"),
    (["dawnbench_fast.imagenet", "--data-dir", "no-data"], "python -m dawnbench_fast.imagenet"),
    # the study's trainer is told of a data folder that does not exist: should the stop be missed,
    # the run it starts ends at once instead of training the default recipe in a process session of its own
    (["dawnbench_fast.analyze", "stability", "--runs", "1", "--", "--data-dir", "/nonexistent/cifar10",
      "--no-download"], "python -m dawnbench_fast.analyze"),
    (["tools.gpu_suite", "--dry-run"], "gpu_suite"),
    (["tools.results", "docs/results"], "python -m tools.results"),
], ids=["package", "imagenet", "analyze", "gpu_suite", "results"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_every_command_catches_a_stop_from_its_first_line(tmp_path, argv, prog, sig):
    ours, trainer = (argv[:argv.index("--")], argv[argv.index("--"):]) if "--" in argv else (argv, [])
    code, lines = _stopped_at([*ours, "--out", str(tmp_path / "out"), *trainer], sig, 0.0)
    assert (code, lines) == (128 + sig, [f"{prog}: stopped by {sig.name} during start-up"])
    assert not (tmp_path / "out").exists()


def test_the_package_imports_nothing_heavy():
    """``python -m dawnbench_fast.X`` imports the package X before its
    __main__.py can install anything: that import must not pull in torch."""
    probe = ("import sys, dawnbench_fast.cifar, dawnbench_fast.imagenet, dawnbench_fast.analyze, "
             "tools.gpu_suite, dawnbench_fast.runner.stopping; "
             "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    # the lazy names still resolve
    from dawnbench_fast import cifar, imagenet
    assert cifar.Config is cifar.task.Config and callable(imagenet.main) and cifar.cli.PROG


# After the start-up the command's own handlers answer, and after main() the exit is covered too.
HAND_OVER = """\
import atexit, os, signal, sys, time
from dawnbench_fast.runner import stopping
stopping.catch_stops_from_start_up("prog")

def stop(sig):
    os.kill(os.getpid(), sig)
    time.sleep(5)  # the signal is handled here

def escapes():  # a stop no handler of the command catches (as before its handlers exist)
    stop(signal.SIGTERM)

def handled():  # the command's own handler (as guarded() is): its line and status
    try:
        stop(signal.SIGINT)
    except KeyboardInterrupt:
        sys.stderr.write("prog: interrupted\\n")
        return 130

def at_exit():  # main() returned 0; the stop comes while the interpreter exits
    atexit.register(stop, signal.SIGTERM)
    return 0

sys.exit(stopping.run_main({"escapes": escapes, "handled": handled, "at_exit": at_exit}[sys.argv[1]]))
"""


@pytest.mark.parametrize(("case", "status", "line"), [
    ("escapes", 143, "prog: stopped by SIGTERM"),
    ("handled", 130, "prog: interrupted"),
    ("at_exit", 143, "prog: stopped by SIGTERM while exiting"),
])
def test_the_command_s_handlers_take_over_and_the_exit_is_covered(case, status, line):
    done = subprocess.run([sys.executable, "-c", HAND_OVER, case], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr.splitlines()) == (status, [line])
