"""Faults a user meets with a study: stopped by a signal (a
scheduler's TERM to its pid, ^C), the study ends the training runs it
started, which run in process sessions of their own where no signal sent to
the study reaches them, and exits 128 + the signal; a damaged run.json met by
``--resume`` is one line naming the file, exit 2.

The signal cases run the real ``python -m dawnbench_fast.analyze stability``
as a subprocess, its trainer replaced by a stand-in that starts a grandchild
in its group and sleeps: no training, a few seconds each."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.analyze_fixtures import fake_launch
from support.processes import kill_all, survivors

from dawnbench_fast.analyze import training_runs
from dawnbench_fast.analyze.__main__ import main

# The study's command line with its trainer module replaced and a 1 s grace before KILL.
# With ELSEWHERE=1 the study's main thread blocks the stop signals after starting a thread
# that does not: the kernel then delivers them to that thread, as it may to any thread of a
# process (importing torch starts one), and the main thread must still act on them.
DRIVER = textwrap.dedent("""\
    import os, signal, sys, threading, time
    from dawnbench_fast.analyze import training_runs
    from dawnbench_fast.analyze.__main__ import main
    from dawnbench_fast.runner import stopping

    if os.environ.get("ELSEWHERE") == "1":
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    stopping.STOP_GRACE_S = 1.0
    training_runs.TRAINER = "standin_trainer"
    sys.exit(main(sys.argv[1:]))
    """)
# The stand-in trainer: writes its pid and its grandchild's (in its cwd, the test's folder), then
# sleeps; IGNORE_TERM makes both deaf to TERM (an ignored signal stays ignored across exec), so
# that only KILL ends them.
STANDIN = textwrap.dedent("""\
    import os, signal, subprocess, sys, time
    if os.environ.get("IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open("pids.tmp", "w") as f:
        f.write(f"{os.getpid()} {grandchild.pid}")
    os.replace("pids.tmp", "pids")  # whole when seen
    time.sleep(600)
    """)


@pytest.mark.parametrize(("sig", "ignore_term", "elsewhere"),
                         [(signal.SIGTERM, True, False), (signal.SIGTERM, False, False),
                          (signal.SIGINT, False, False), (signal.SIGINT, False, True),
                          (signal.SIGTERM, False, True)])
def test_a_stopped_study_ends_the_runs_it_started(tmp_path, sig, ignore_term, elsewhere):
    """``elsewhere``: the signal reaches a thread other than the main one,
    while the main thread waits on a trainer that prints nothing."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc to see the processes")
    (tmp_path / "standin_trainer.py").write_text(STANDIN)
    out = tmp_path / "study"
    env = {**os.environ, "IGNORE_TERM": "1" if ignore_term else "0", "ELSEWHERE": "1" if elsewhere else "0"}
    # cwd: where `python -m standin_trainer` finds the stand-in
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, "stability", "--runs", "1", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    pids: list[int] = []
    said = tmp_path / "pids"
    try:
        deadline = time.monotonic() + 120
        while not pids:
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the stand-in trainer did not start in 120 s"
            pids = [int(w) for w in said.read_text().split()] if said.exists() else []
            time.sleep(0.05)
        proc.send_signal(sig)  # to the study's pid alone, as a scheduler sends it
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + sig, err[-2000:]
        assert "Traceback" not in err, err
        assert "--resume" in err  # how to go on with the study
        assert not survivors(pids), "a run the study started outlived it"
    finally:
        proc.kill()
        kill_all(pids)


@pytest.mark.parametrize("command", ["python -m dawnbench_fast.cifar", {"argv": []}, 7,
                                     ["python", "-m", "dawnbench_fast.cifar", 3]])
def test_resume_with_a_damaged_command_in_run_json_is_one_line(tmp_path, monkeypatch, capsys, command):
    calls: list = []
    monkeypatch.setattr(training_runs, "launch_trainer", fake_launch(lambda argv: [(1, 5.0, 0.95)], calls))
    out = tmp_path / "study"
    assert main(["stability", "--runs", "1", "--out", str(out)]) == 0
    path = out / "runs" / "default-s0" / "run.json"
    run = json.loads(path.read_text())
    run["command"] = command
    path.write_text(json.dumps(run))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["stability", "--runs", "1", "--resume", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m dawnbench_fast.analyze: error: --resume "), err
    assert str(path) in err[0] and "command" in err[0], err
    assert len(calls) == 1  # nothing trained again
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # the folder as it was
