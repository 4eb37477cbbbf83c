"""Two runs into one folder: of two started together exactly one takes
``--out``, whatever the timing; the other is refused in one line naming the
folder (or, for the default folder, takes the next name). A claim left by a
killed run is taken over. (runner/claim.py)

The pairs race for real: threads calling the claim at once after a barrier,
and two trainer processes, started once, that each wait for a go on stdin
and then run the command's own checks; their set-up (``cli.start_run``, the
first step after the claim) is replaced by a stand-in that waits a moment,
as a real run's data load does, then writes into --out and stops.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.runner import claim, cli

ROOT = Path(__file__).resolve().parents[2]
PAIRS = 10


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _claim_pair(folder: Path) -> tuple[list[claim.Claim], list[str]]:
    """Two threads claim ``folder`` at once: (the claims won, the refusals' words)."""
    barrier, won, refused = threading.Barrier(2), [], []

    def take() -> None:
        barrier.wait()
        try:
            won.append(claim.claim(folder))
        except claim.FolderInUse as e:
            refused.append(str(e))

    threads = [threading.Thread(target=take) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won, refused


def test_of_two_claims_made_together_exactly_one_wins(tmp_path):
    for k in range(PAIRS):
        folder = tmp_path / f"out{k}" / "run"  # missing, with a missing parent: both create them
        won, refused = _claim_pair(folder)
        assert (len(won), len(refused)) == (1, 1), (k, refused)
        assert refused[0].startswith(f"--out {folder}: in use by another run (pid {os.getpid()}")
        assert "pass another --out folder" in refused[0]
        won[0].release()
        # no file left (the folders the winner made go with its claim; those the other made
        # while the winner held the folder stay, empty)
        assert not [p for p in (tmp_path / f"out{k}").rglob("*") if not p.is_dir()]


def test_a_claim_is_released_and_taken_again(tmp_path):
    held = claim.claim(tmp_path)
    assert (tmp_path / claim.CLAIM_NAME).read_text().split()[0] == str(os.getpid())
    assert not claim.holds_files(tmp_path)  # the claim alone is no result
    with pytest.raises(claim.FolderInUse):
        claim.claim(tmp_path)
    held.release()
    held.release()  # twice is harmless
    assert list(tmp_path.iterdir()) == []  # a folder that existed is kept, empty as it was
    claim.claim(tmp_path).release()


def test_a_stale_claim_is_taken_over(tmp_path):
    dead = _dead_pid()
    (tmp_path / claim.CLAIM_NAME).write_text(f"{dead} somehost\n")  # a run killed before it released
    held = claim.claim(tmp_path)
    assert (tmp_path / claim.CLAIM_NAME).read_text().split()[0] == str(os.getpid())
    held.release()


def test_without_locks_the_pid_decides(tmp_path, monkeypatch):
    """A file system that keeps no locks: a live process of this host named in the claim keeps
    it, a dead one's is taken over."""
    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(claim.fcntl, "flock", no_locks)
    host = claim._host()
    (tmp_path / claim.CLAIM_NAME).write_text(f"{os.getppid()} {host}\n")  # alive: the test's parent
    with pytest.raises(claim.FolderInUse, match=f"pid {os.getppid()}\\b"):
        claim.claim(tmp_path)
    (tmp_path / claim.CLAIM_NAME).write_text(f"{_dead_pid()} {host}\n")
    claim.claim(tmp_path).release()


HOLDER = textwrap.dedent("""\
    import sys, time
    from pathlib import Path
    from dawnbench_fast.runner import claim
    claim.claim(Path(sys.argv[1]))
    print("held", flush=True)
    time.sleep(120)
    """)


def test_a_killed_runs_claim_is_taken_over(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline() == "held\n"
        with pytest.raises(claim.FolderInUse, match=f"in use by another run \\(pid {proc.pid}, "):
            claim.claim(tmp_path)
        proc.send_signal(signal.SIGKILL)  # no clean-up: its claim file stays
        proc.wait()
        assert (tmp_path / claim.CLAIM_NAME).exists()
        claim.claim(tmp_path).release()
    finally:
        proc.kill()
        proc.wait()


def _args(out: Path, **flags: object) -> argparse.Namespace:
    given = {"out": str(out), "default_out": str(out.parent), "seed": 0, "runs": 1, "overwrite": False,
             "resume": None}
    return argparse.Namespace(**{**given, **flags})


def test_the_folder_is_checked_again_once_claimed(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text("{}")  # an earlier run's results
    with pytest.raises(ConfigError, match="folder is not empty.*--overwrite"):
        cli.claim_out(_args(out))
    assert sorted(p.name for p in out.iterdir()) == ["run.json"]  # the refused claim is gone
    for flags in ({"overwrite": True}, {"resume": str(out)}):
        held = cli.claim_out(_args(out, **flags))
        with pytest.raises(ConfigError, match="in use by another run"):  # still one run at a time
            cli.claim_out(_args(out, **flags))
        held.release()


def test_the_default_folder_moves_on_to_the_next_name(tmp_path):
    taken = tmp_path / "20250101T000000Z-seed0"
    first = cli.claim_out(_args(taken, out_is_fresh=True))
    args = _args(taken, out_is_fresh=True)
    second = cli.claim_out(args)  # the name it was given is held: the next free one
    assert second.folder == Path(args.out) != taken and second.folder.parent == tmp_path
    first.release()
    second.release()


def test_a_study_claims_its_out_too(tmp_path, monkeypatch):
    from dawnbench_fast.analyze import study_cli

    monkeypatch.setattr(study_cli, "DEFAULT_OUT", tmp_path / "analysis")
    first = argparse.Namespace(out=str(tmp_path / "study"), overwrite=False, resume=None)
    assert study_cli.resolve_out(first, "stability") == tmp_path / "study"
    with pytest.raises(ConfigError, match=f"--out {tmp_path / 'study'}: in use by another run"):
        study_cli.resolve_out(argparse.Namespace(out=str(tmp_path / "study"), overwrite=True, resume=None),
                              "stability")
    study_cli.release_out(first)
    assert not (tmp_path / "study").exists()  # made for the claim, empty: gone with it
    a, b = (argparse.Namespace(out=None, overwrite=False, resume=None) for _ in range(2))
    folders = [study_cli.resolve_out(a, "stability"), study_cli.resolve_out(b, "stability")]
    # the same second gives the second study ...-stability-2; a new second, a new stamp
    assert folders[0] != folders[1] and folders[0].parent == folders[1].parent == tmp_path / "analysis"
    for args in (a, b):
        study_cli.release_out(args)


# A trainer process that races: imports once, then for each line on stdin runs the command with
# that line's flags; the set-up after the claim waits 0.3 s (a real run's data load takes longer),
# writes a file into --out and stops. It prints each run's status and stderr as one JSON line.
RACER = textwrap.dedent("""\
    import contextlib, io, json, os, sys, time
    from pathlib import Path
    from dawnbench_fast import cifar
    from dawnbench_fast.runner import cli

    class Stop(Exception):
        pass

    def start_run(cfg):
        time.sleep(0.3)
        out = Path(RESOLVED[-1].out)  # the folder the command settled on
        out.mkdir(parents=True, exist_ok=True)
        (out / f"written-by-{os.getpid()}").write_text("")
        raise Stop()

    def resolve_out(args, resolve=cli.resolve_out):
        resolve(args)
        RESOLVED.append(args)

    RESOLVED, cli.start_run, cli.resolve_out = [], start_run, resolve_out
    print("ready", flush=True)
    for line in sys.stdin:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                code = cifar.main(json.loads(line))
            except Stop:
                code = 0
        print(json.dumps({"code": code, "err": err.getvalue()}), flush=True)
    """)


@pytest.fixture(scope="module")
def racers(tmp_path_factory):
    """The two racing processes, started once for the tests below (their imports take seconds);
    (the processes, their working folder: where the default --out goes)."""
    cwd = tmp_path_factory.mktemp("racers")
    procs = [subprocess.Popen([sys.executable, "-c", RACER], cwd=cwd, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
             for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout.readline() == "ready\n"
        yield procs, cwd
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _race(racers: tuple[list[subprocess.Popen], Path], argv: list[str]) -> list[dict]:
    procs = racers[0]
    for p in procs:  # the go, one right after the other
        p.stdin.write(json.dumps(argv) + "\n")
        p.stdin.flush()
    return [json.loads(p.stdout.readline()) for p in procs]


BASE = ["--data-dir", "no-data", "--no-download", "--no-progress", "--epochs", "1"]


def test_two_runs_started_together_into_one_out_one_is_refused(tmp_path, racers):
    for k in range(PAIRS):
        out = tmp_path / f"race{k}"
        results = _race(racers, [*BASE, "--out", str(out)])
        codes = sorted(r["code"] for r in results)
        assert codes == [0, 2], (k, results)
        (line,) = next(r for r in results if r["code"] == 2)["err"].splitlines()
        assert line.startswith(f"python -m dawnbench_fast.cifar: error: --out {out}: "), line
        assert ("in use by another run" in line or "folder is not empty" in line), line
        assert len([p for p in out.iterdir() if p.name.startswith("written-by-")]) == 1
        assert not (out / claim.CLAIM_NAME).exists()  # released at the end of the run


def test_two_runs_started_together_without_out_get_two_folders(racers):
    for k in range(3):
        results = _race(racers, [*BASE, "--seed", str(k)])
        assert [r["code"] for r in results] == [0, 0], results
        folders = sorted((racers[1] / "runs" / "cifar10").glob(f"*-seed{k}*"))
        assert len(folders) == 2, folders
        for folder in folders:
            assert len(list(folder.glob("written-by-*"))) == 1, folder
