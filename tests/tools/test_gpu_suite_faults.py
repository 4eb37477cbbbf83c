"""Faults a user meets with the GPU suite (tools/gpu_suite/):
run without --dry-run on a machine without a GPU it says so in one line
before any work; a non-finite budget or target is refused; stopped by a
signal (a scheduler's TERM, ^C, a closed terminal's HUP) it ends the runs it
started, which run in process sessions of their own where no signal sent to
the suite reaches them, records the stop and exits 128 + the signal.

The signal cases run the real suite's main() as a subprocess with one part
replaced by a stand-in that starts, through run_logged, a child that starts a
grandchild in its own process group, both sleeping: no training, a few
seconds each."""

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
from support.processes import kill_all, survivors

from tools.gpu_suite import suite as gpu_suite

ROOT = Path(__file__).resolve().parents[2]
SUITE = [sys.executable, "-m", "tools.gpu_suite"]


def test_without_a_gpu_the_suite_refuses_in_one_line_before_any_work(tmp_path):
    out = tmp_path / "o"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, even on a machine that has one
    t0 = time.monotonic()
    r = subprocess.run([*SUITE, "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env=env)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert lines[0].startswith("gpu_suite: no GPU here") and "--dry-run" in lines[0], lines[0]
    assert not out.exists() and r.stdout == ""  # nothing built, run or written
    assert time.monotonic() - t0 < 60  # the time to import torch, not a build or a training


@pytest.mark.parametrize(("flag", "value"), [("--part-budget", "nan"), ("--part-budget", "inf"),
                                             ("--target", "nan"), ("--target", "inf")])
def test_a_non_finite_budget_or_target_is_refused(tmp_path, capsys, flag, value):
    assert gpu_suite.main(["--out", str(tmp_path / "o"), "--dry-run", flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpu_suite: ") and flag in err[0], err
    assert not (tmp_path / "o").exists()


# The stand-in: a part whose run_logged child starts a grandchild (its own group, as
# torch.compile's workers are) and says both pids, then sleeps; IGNORE_TERM makes
# both deaf to TERM (an ignored signal stays ignored across exec), so only KILL ends them.
DRIVER = textwrap.dedent("""\
    import sys
    from tools.gpu_suite import record as gpu_suite_record, suite as gpu_suite

    gpu_suite_record.STOP_GRACE_S = 1.0
    CHILD = '''
    import os, signal, subprocess, sys, time
    if sys.argv[1] == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("pids", os.getpid(), grandchild.pid, flush=True)
    time.sleep(600)
    '''

    def stand_in(suite, args):
        suite.part("ops")
        gpu_suite_record.run_logged(suite, [sys.executable, "-c", CHILD, sys.argv[2]], "child.log", 600)
        suite.end("ops")

    gpu_suite.RUNNERS["ops"] = stand_in
    gpu_suite.environment = lambda: {"recorded": "now"}
    sys.exit(gpu_suite.main(["--out", sys.argv[1], "--dry-run", "--only", "ops"]))
    """)


@pytest.mark.parametrize(("sig", "ignore_term"), [(signal.SIGTERM, True), (signal.SIGINT, False),
                                                  (signal.SIGHUP, False)])
def test_a_stop_signal_ends_the_runs_the_suite_started_and_is_recorded(tmp_path, sig, ignore_term):
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc to see the processes")
    out = tmp_path / "suite"
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(out), "1" if ignore_term else "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    pids: list[int] = []
    log = out / "logs" / "child.log"
    try:
        deadline = time.monotonic() + 120
        while not pids:
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the stand-in child did not start in 120 s"
            words = log.read_text().split() if log.exists() else []
            pids = [int(w) for w in words[1:3]] if len(words) >= 3 and words[0] == "pids" else []
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + sig, err[-2000:]
        assert "Traceback" not in err, err
        assert not survivors(pids), "a run the suite started outlived it"
    finally:
        proc.kill()
        kill_all(pids)
    name = signal.Signals(sig).name
    data = json.loads((out / "suite.json").read_text())
    assert data["commands"][-1]["stopped_by"] == name
    assert data["parts"]["ops"]["status"] == "stopped" and name in data["parts"]["ops"]["reason"]
    assert f"stopped by {name}" in (out / "suite.log").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["logs", "suite.json", "suite.log"]  # no temporary file


@pytest.mark.parametrize("damage", [b'{"schema_version": 1, "comm', b"\xff\xfe not text", b"[]",
                                    b'{"commands": {}, "parts": {}}'])
def test_a_damaged_suite_json_in_out_is_one_line_and_left_as_it_was(tmp_path, damage):
    out = tmp_path / "o"
    out.mkdir()
    (out / "suite.json").write_bytes(damage)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([*SUITE, "--out", str(out), "--dry-run", "--only", "ops"], capture_output=True,
                       text=True, timeout=120, cwd=ROOT, env=env)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert lines[0].startswith("gpu_suite: --out ") and str(out / "suite.json") in lines[0], lines[0]
    assert "new --out" in lines[0] and "move the file away" in lines[0], lines[0]
    assert (out / "suite.json").read_bytes() == damage and [p.name for p in out.iterdir()] == ["suite.json"]
