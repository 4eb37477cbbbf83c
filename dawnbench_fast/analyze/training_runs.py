"""The training runs of a study: each arm's seeds trained by the trainer's own
command line, ``python -m dawnbench_fast.cifar ... --out OUT/runs/<arm>-s<seed>``,
one subprocess each, then read back from the run.json it wrote.

Why a subprocess and not the Python API: each run keeps its whole report
folder (run.json, TSV, epochs.jsonl, checkpoint) for a later ``--from``, and
no state (kernel choices, thread settings, allocator growth, RNG) leaks from
one arm into the next. Every planned command is first resolved in-process by
the trainer's own parser and recipe checks, so a bad flag fails in one line
before the first run starts, not hours into a study.
"""

from __future__ import annotations

import codecs
import dataclasses
import os
import re
import selectors
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from dawnbench_fast import cifar
from dawnbench_fast.analyze.run_records import RUN_JSON, RunRecord, read_run
from dawnbench_fast.config import config_file
from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.runner import stopping
from dawnbench_fast.training.checkpoint import RUN_CHECKPOINT

TRAINER = "dawnbench_fast.cifar"
RUNS_FOLDER = "runs"
# the trainer's evaluation lines and its per-run result line: shown as progress
PROGRESS_LINE = re.compile(r"seed \d+[ :]")


@dataclass
class Arm:
    """One configuration of a study: a name (its run folders' prefix), what it
    changes in a line, and the trainer flags that make it."""

    name: str
    what: str
    flags: list[str] = field(default_factory=list)


@dataclass
class Failure:
    """A run whose trainer exited non-zero (diverged, out of memory, killed)."""

    arm: str
    seed: int
    error: str
    log: str


@dataclass
class Outcome:
    """The finished runs of a study (in plan order) and the failed ones."""

    records: list[RunRecord]
    failures: list[Failure]


# (argv, log path) -> (exit status, wall seconds, the last line it printed)
Launch = Callable[[list[str], Path], tuple[int, float, str]]


def resolve_config(argv: list[str]) -> cifar.Config:
    """The config the trainer would run for ``argv``, by its own parser and
    checks: a bad flag or value is its one-line error (exit status 2) now."""
    return cifar.config_from_args(config_file.parse_args(cifar.build_parser(), argv))


def run_folder(out: Path, arm: str, seed: int) -> Path:
    return out / RUNS_FOLDER / f"{arm}-s{seed}"


def trainer_argv(base: list[str], arm: Arm, seed: int, folder: Path, resume: bool,
                 overwrite: bool) -> list[str]:
    """The trainer's flags for one run: the study's shared flags, the arm's
    (after them, so the arm wins: argparse keeps the last value, and --set
    applies in order), the seed and the run's folder."""
    argv = [*base, *arm.flags, "--seed", str(seed), "--out", str(folder)]
    if resume and (folder / RUN_CHECKPOINT).exists():
        argv += ["--resume", str(folder)]  # an interrupted run goes on from its last epoch
    elif overwrite or resume:
        argv.append("--overwrite")  # resuming, a run killed before its first checkpoint starts again
    return argv


def check_plan(base: list[str], arms: list[Arm]) -> dict[str, cifar.Config]:
    """Each arm's resolved config (seed aside), so every arm's flags are
    checked before anything trains."""
    return {arm.name: resolve_config([*base, *arm.flags]) for arm in arms}


def train_arms(base: list[str], arms: list[Arm], seeds: list[int], out: Path, *, resume: bool,
               overwrite: bool, launch: Launch | None = None) -> Outcome:
    """Train every (arm, seed), printing a line as each starts and ends. With
    ``resume``, a run whose run.json is already there (an earlier, interrupted
    study) is read back instead of trained, after checking it was made by the
    same command."""
    launch = launch or launch_trainer
    check_plan(base, arms)
    total, k = len(arms) * len(seeds), 0
    records, failures = [], []
    for arm in arms:
        for seed in seeds:
            k += 1
            folder = run_folder(out, arm.name, seed)
            argv = trainer_argv(base, arm, seed, folder, resume, overwrite)
            head = f"[{k}/{total}] {arm.name} seed {seed}"
            if resume and (folder / RUN_JSON).exists():
                record = read_back(folder, argv)
                print(f"{head}: read back from {folder}", flush=True)
            else:
                log = folder.parent / f"{folder.name}.log"
                print(f"{head}: training ({arm.what}); log {log}", flush=True)
                try:
                    rc, wall, last = launch(argv, log)
                except KeyboardInterrupt:
                    sys.stderr.write(f"interrupted: the finished runs and {folder.name}'s last checkpoint "
                                     f"are kept; go on with the same command plus --resume {out}\n")
                    raise
                if rc != 0 or not (folder / RUN_JSON).exists():
                    failures.append(Failure(arm.name, seed, last or f"exit status {rc}", str(log)))
                    print(f"{head}: failed (exit status {rc}): {last}", flush=True)
                    continue
                record = dataclasses.replace(read_run(folder / RUN_JSON, "run"), wall_seconds=wall)
            records.append(record)
            print(f"{head}: {done_line(record)}", flush=True)
    return Outcome(records, failures)


def done_line(r: RunRecord) -> str:
    t = r.time_to(r.target)
    when = "not reached" if t is None else f"{t:.1f} s (epoch {r.epoch_to(r.target)})"
    wall = "" if r.wall_seconds is None else f", process wall {r.wall_seconds:.1f} s"
    return f"final top-1 {100 * r.final_top1:.2f}%, time to {100 * r.target:.2f}%: {when}{wall}"


def read_back(folder: Path, argv: list[str]) -> RunRecord:
    """A finished run of an earlier study, refused if its command differs
    from the one this study would run (its results would be mislabelled)."""
    path = folder / RUN_JSON
    record = read_run(path, "--resume")
    command = [] if record.command is None else record.command  # older files recorded none
    # checked here, where it is compared and joined: read_run keeps the key as the file has it
    if not isinstance(command, list) or not all(isinstance(w, str) for w in command):
        raise ConfigError(f"--resume {path}: run.json's command is not a list of words "
                          f"({type(command).__name__}); the file is damaged: move {folder} away and "
                          "run --resume again to train that run anew")
    recorded = command[3:]  # without `python -m dawnbench_fast.cifar`
    if _comparable(recorded) != _comparable(argv):
        raise ConfigError(f"--resume: {folder} was trained by another command ({' '.join(recorded)}); "
                          "use a new --out for a different study")
    return record


def _comparable(argv: list[str]) -> list[str]:
    """A trainer command without what only says where and how it was
    (re)started: --out, --resume and --overwrite."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--out", "--resume"):
            skip = True
        elif arg != "--overwrite":
            out.append(arg)
    return out


def launch_trainer(argv: list[str], log: Path) -> tuple[int, float, str]:
    """Run the trainer with ``argv``; its output goes to ``log`` whole and its
    evaluation lines (``seed ...``) to the console, indented, as progress."""
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # lines reach the log and the console as printed
    # A session of its own, so that the trainer and whatever it starts (DataLoader and compile
    # workers) are one group that ends with the study: a scheduler's TERM goes to the study's pid
    # alone, and ^C at the terminal reaches the study, which passes it on (follow_trainer).
    # line-buffered: the log holds every line printed, even when the study is killed
    with log.open("w", buffering=1) as sink, subprocess.Popen(
            [sys.executable, "-m", TRAINER, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, bufsize=1, env=env, start_new_session=True) as proc:
        try:
            last = follow_trainer(proc, sink)
        except BaseException:  # stopped (TERM, ^C) or anything else: the run ends with the study
            # ended before the pipe closes (Popen.__exit__), so that the trainer saves its checkpoint
            # and says so on TERM instead of dying of a broken pipe at its next line
            stopping.end_group(proc, stopping.STOP_GRACE_S)
            raise
        rc = proc.wait()
    return rc, time.perf_counter() - t0, last


# Seconds the study's main thread waits on the trainer's output at a time. A
# signal sent to the study (a scheduler's TERM, ^C) may be delivered to any of its
# threads (importing torch starts one); its Python handler then runs only when the
# main thread next runs bytecode, so a blocking read of a trainer that prints
# nothing for minutes would hold the stop back that long.
WAKE_S = 0.25


def follow_trainer(proc: subprocess.Popen, sink: IO[str]) -> str:
    """Copy the trainer's output to ``sink`` and its progress lines to the
    console until it closes its output; returns the last line it printed.
    The pipe is waited on :data:`WAKE_S` at a time, so that a stop signal
    is acted on within that, whichever thread the kernel delivered it to."""
    assert proc.stdout is not None  # started with stdout=PIPE
    fd = proc.stdout.fileno()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    last, pending = "", ""

    def take(line: str) -> None:
        nonlocal last
        sink.write(line)
        if line.strip():
            last = line.strip()
        if PROGRESS_LINE.match(line):
            print(f"    {line.rstrip()}", flush=True)

    with selectors.DefaultSelector() as waiting:
        waiting.register(fd, selectors.EVENT_READ)
        while True:
            if not waiting.select(timeout=WAKE_S):
                continue  # nothing yet: back to bytecode, where a pending signal's handler runs
            chunk = os.read(fd, 1 << 16)
            pending += decoder.decode(chunk, final=not chunk)
            *lines, pending = pending.split("\n")
            for line in lines:
                take(line + "\n")
            if not chunk:  # the trainer closed its output
                break
    if pending:
        take(pending)
    return last
