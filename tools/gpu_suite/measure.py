"""The prepared measuring script: the commands that measure the project on
a GPU machine without network, reached by a command runner that returns a
few files (each command cut at ``--command-limit``, 600 s; results only
through one output folder of at most ``--max-files`` flat files of
``--max-file-mib`` each), once CIFAR-10 and the published script are on the
machine (docs/GPU_SUITE.md, "The measuring procedure", gives the commands
in order and their times):

    # in the first data call, in the background:
    setsid nohup python3 -m tools.gpu_suite.measure --work W --stages build,warm &
    # once the data is there:
    python3 -m tools.gpu_suite.measure --work W --copy-to OUT \\
        --data-dir CIFAR_DIR --peer PATH/airbench94_muon.py

In order, each stage one command (of the GPU suite, suite.py, or of our
trainer) filling W/suite.json as it goes:

0. the source stamp (``--stamp``): every command and run records the commit
   the files were carried from, whatever the machine's copy of .git says; no
   stamp, no measurement (``--no-stamp``); the compile caches of the last run
   on the same GPU model and torch version, restored from ``--cache-from``
   into W/cache (Inductor's and Triton's, for every command); and, in the
   measuring command, the background warm-up awaited (at most
   ``--warm-wait`` seconds, then ended: it must not share the GPU with a
   timed run);
1. ``build``: the extension (skipped where an earlier command built it);
2. ``warm`` (the background command's, while the data travels): our
   trainer's own warm-up on random images of CIFAR-10's shapes, in
   ``default`` then ``max-autotune-no-cudagraphs``, filling the caches on
   disk; a marker per mode finished (W/cache/warmed/);
3. ``peer``: our trainer first (``--runs`` seeds in one process, in the
   compile mode plan.choose_mode picks), then the published script
   (``AIRBENCH_RUNS=--runs``); further blocks alternate the order if the
   budget holds them. Where our side wrote no run.json it is run again with
   ``--set capture=off`` (the ``retry``, the suite's trainer part);
4. ``profile``: the timed step profiled (``--profile-steps``) through the
   roofline report, with ``--set capture=off`` once a capture failure or a
   failed side of ours was seen.

Each stage keeps to its budget and all of them to ``--limit``. After each,
the files that matter go to ``--copy-to`` (carry.py), so a command stopped
at its limit keeps what it finished; the caches go there last, named for the
GPU and torch version, to be carried next time. suite.json's ``measure``
records all of it; its ``ratio`` is the headline, with both sides'
accuracies and whether it is valid. ``--dry-run`` goes through all of it on
the CPU at tiny sizes (a stand-in for the published script, a one-step
profile).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from dawnbench_fast import atomic
from dawnbench_fast.reporting import provenance
from tools.gpu_suite import carry, plan
from tools.gpu_suite.background import (
    BACKGROUND,
    KEEP_S,
    MIN_STAGE_S,
    Clock,
    SystemClock,
    await_background,
    marker_path,
    run_warm,
    write_marker,
)
from tools.gpu_suite.record import (
    SCHEMA_VERSION,
    Logs,
    Stopped,
    UsageError,
    add_trainer_args,
    comma_list,
    now,
    read_suite,
    run_logged,
    stop_on_signals,
)

STAGES = ("build", "warm", "peer", "profile")
DEFAULT_STAGES = ("build", "peer", "profile")  # warm: the background command's, while the data travels
PART_OF = {"build": "build", "peer": "peer", "retry": "trainer", "profile": "roofline"}  # suite parts
COMMAND_LIMIT_S = 600.0  # the command runner cuts a command here
LIMIT_MARGIN_S = 60.0  # --limit's default below it: the runner's start and the files' copy back
START_S = 45.0  # a suite command's time beyond its part's budget: torch's import, the environment
PROBE = ("import json, torch; print(json.dumps({'torch': torch.__version__, 'gpu': "
         "torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))")
CAPTURE_OFF = ["--set", "capture=off"]


# (the log owner, the command, its log's name, timeout) -> (exit status or None, seconds, log path)
Runner = Callable[[Logs, list[str], str, float], "tuple[int | None, float, Path]"]


class Measure:
    """The command's folder, its log (lines appended to suite.log beside the
    suite's own) and its record, suite.json's ``measure``, merged into the
    file between the suite's commands (never held across one: they rewrite it).
    ``clock`` and ``run`` (what starts a command) are injectable: the plan
    is tested with a fake clock and fake commands."""

    def __init__(self, work: Path, limit_s: float, clock: Clock | None = None, run: Runner | None = None,
                 t0: float | None = None):
        self.clock = clock or SystemClock()
        self.run: Runner = run or run_logged
        self.out, self.limit_s = work, limit_s
        self.t0 = self.clock.monotonic() if t0 is None else t0
        self.path, self.log_path = work / "suite.json", work / "suite.log"
        work.mkdir(parents=True, exist_ok=True)
        data = read_suite(self.path) if self.path.exists() else \
            {"schema_version": SCHEMA_VERSION, "commands": [], "parts": {}}
        if "measure" in data:  # an earlier command in this folder (the build, while the data travelled)
            data.setdefault("measure_earlier", []).append(data.pop("measure"))
        self.rec: dict = {"started": now(), "argv": sys.argv[1:], "stages": []}
        atomic.write_json(self.path, {**data, "measure": self.rec})

    def elapsed(self) -> float:
        return self.clock.monotonic() - self.t0

    def left(self) -> float:
        return self.limit_s - self.elapsed()

    def log(self, line: str) -> None:
        stamped = f"{now()} [measure] {line}"
        print(stamped, flush=True)
        with open(self.log_path, "a") as f:
            f.write(stamped + "\n")

    def suite(self) -> dict:
        return read_suite(self.path)

    def save(self) -> None:
        atomic.write_json(self.path, {**self.suite(), "measure": self.rec})


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.gpu_suite.measure",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--work", required=True, help="the suite's folder (suite.json, suite.log, runs, caches)")
    p.add_argument("--copy-to", metavar="DIR", help="where the returned files go as they are made")
    p.add_argument("--data-dir", help="CIFAR-10 folder (binary or cifar-10-batches-py layout)")
    p.add_argument("--peer", metavar="PATH",
                   help="the published airbench94_muon.py (a stand-in in a dry run)")
    p.add_argument("--stamp", default=".gpu/kit/source.json",
                   help="the source stamp carried with the files")
    p.add_argument("--no-stamp", action="store_true",
                   help="measure without a stamp (git's word, maybe stale)")
    p.add_argument("--cache-from", default=".gpu/cache", metavar="DIR", help="carried cache tarballs")
    p.add_argument("--stages", default=",".join(DEFAULT_STAGES),
                   help=f"comma-separated, of {', '.join(STAGES)}")
    g = p.add_argument_group("the command runner's limits")
    g.add_argument("--command-limit", type=float, default=COMMAND_LIMIT_S, metavar="S",
                   help="where the runner cuts a command")
    g.add_argument("--limit", type=float, metavar="S",
                   help=f"seconds for everything (default: --command-limit less {LIMIT_MARGIN_S:.0f})")
    g.add_argument("--max-files", type=int, default=carry.MAX_FILES, help="files the runner returns")
    g.add_argument("--max-file-mib", type=float, default=carry.MAX_FILE_BYTES / 2**20,
                   help="the size of each returned file")
    g = p.add_argument_group("stage budgets (seconds)")
    g.add_argument("--build-budget", type=float, default=150.0, metavar="S")
    g.add_argument("--warm-budget", type=float, default=420.0, metavar="S",
                   help="the background warm-up, both compile modes")
    g.add_argument("--warm-wait", type=float, default=90.0, metavar="S",
                   help="how long the measuring command awaits the background warm-up before ending it")
    g.add_argument("--peer-budget", type=float, default=330.0, metavar="S",
                   help="our seeds then the published script; another block only within it")
    g.add_argument("--retry-budget", type=float, default=120.0, metavar="S",
                   help="our seeds again with --set capture=off where our side wrote no run.json")
    # the profile runs the trainer's own warm-up (compile, capture) first: the peer stage's caches shorten it
    g.add_argument("--profile-budget", type=float, default=90.0, metavar="S")
    est = plan.Estimates()
    g = p.add_argument_group("what the plan counts on (seconds; the defaults are an H200's)")
    g.add_argument("--peer-warmup-s", type=float, default=est.peer_warmup_s, metavar="S")
    g.add_argument("--peer-run-s", type=float, default=est.peer_run_s, metavar="S")
    g.add_argument("--ours-run-s", type=float, default=est.ours_run_s, metavar="S")
    g.add_argument("--ours-start-s", type=float, default=est.ours_start_s, metavar="S")
    g.add_argument("--cold-autotune-s", type=float, default=est.cold_autotune_s, metavar="S",
                   help="our warm-up in max-autotune-no-cudagraphs from cold caches")
    p.add_argument("--runs", type=int, default=8, help="the published script's runs and our seeds, a block")
    p.add_argument("--min-runs", type=int, default=5, help="fewer runs a side: the ratio is invalid")
    p.add_argument("--blocks", type=int, default=2, help="blocks at most (the second only if time remains)")
    p.add_argument("--seed", type=int, default=0, help="our first seed")
    p.add_argument("--profile-steps", type=int, default=3)
    p.add_argument("--ncu-kernels", type=int, default=0, help="ncu on the profile's top kernels (0: none)")
    p.add_argument("--target", type=float, default=0.94, help="the accuracy both sides are held to")
    p.add_argument("--dry-run", action="store_true", help="every stage on the CPU at tiny sizes, no timing")
    add_trainer_args(p)
    return p


def estimates(args: argparse.Namespace) -> plan.Estimates:
    return plan.Estimates(peer_warmup_s=args.peer_warmup_s, peer_run_s=args.peer_run_s,
                          ours_run_s=args.ours_run_s, ours_start_s=args.ours_start_s,
                          cold_autotune_s=args.cold_autotune_s)


def check_args(args: argparse.Namespace) -> list[str]:
    named = comma_list(args.stages, STAGES, "--stages", "stages")
    stages = [s for s in STAGES if s in named]  # always in the script's order, whatever the flag's
    if args.limit is None:
        args.limit = args.command_limit - LIMIT_MARGIN_S
    seconds = {"--command-limit": args.command_limit, "--limit": args.limit,
               "--max-file-mib": args.max_file_mib,
               **{f"--{k.replace('_', '-')}": getattr(args, k) for k in (
                   "build_budget", "warm_budget", "peer_budget", "retry_budget", "profile_budget",
                   "peer_warmup_s", "peer_run_s", "ours_run_s", "ours_start_s", "cold_autotune_s")}}
    for flag, value in seconds.items():
        if not 0 < value < math.inf:
            raise UsageError(f"{flag} {value}: must be positive (and finite)")
    if not 0 <= args.warm_wait < math.inf:
        raise UsageError(f"--warm-wait {args.warm_wait}: must be 0 or more (and finite)")
    for flag, value in (("--runs", args.runs), ("--blocks", args.blocks), ("--min-runs", args.min_runs),
                        ("--profile-steps", args.profile_steps), ("--max-files", args.max_files)):
        if value < 1:
            raise UsageError(f"{flag} {value}: must be at least 1")
    if args.limit > args.command_limit:
        raise UsageError(f"--limit {args.limit:g}: past --command-limit {args.command_limit:g}, where the "
                         "runner would cut the command before its files are sent")
    if not 0 < args.target <= 1:
        raise UsageError(f"--target {args.target}: an accuracy, a fraction in (0, 1]")
    if not args.no_stamp and not os.environ.get(provenance.STAMP_ENV) and not Path(args.stamp).is_file():
        raise UsageError(f"--stamp {args.stamp}: no source stamp, so the commit measured would not be known; "
                         "make it where the files come from (python -m dawnbench_fast.reporting.provenance "
                         "stamp .gpu/kit/source.json) and carry it, or give --no-stamp")
    if "peer" in stages and not args.dry_run and not (args.peer and Path(args.peer).is_file()):
        raise UsageError(f"--peer {args.peer}: the published airbench94_muon.py is needed by the peer stage")
    if args.data_dir and not Path(args.data_dir).is_dir():
        raise UsageError(f"--data-dir {args.data_dir}: no such folder")
    return stages


def suite_command(args: argparse.Namespace, stage: str, budget: float, extra: list[str] = ()) -> list[str]:
    """The GPU suite's command for ``stage`` with ``budget`` seconds for its
    part; ``extra`` goes to its trainer commands after ``--trainer-args``'."""
    cmd = [sys.executable, "-m", "tools.gpu_suite", "--out", str(args.work),
           "--part-budget", f"{budget:.0f}", "--only", PART_OF[stage]]
    cmd += ["--dry-run"] if args.dry_run else []
    if stage == "build":
        return cmd
    cmd += ["--data-dir", args.data_dir] if args.data_dir else []
    if stage == "peer":
        # ours opens the first block (no --peer-first): the published script's cold
        # max-autotune warm-up would otherwise eat the budget before ours has run
        cmd += ["--peer-runs", str(args.runs), "--peer-blocks", str(args.blocks),
                "--target", str(args.target), "--seed", str(args.seed),
                "--peer-warmup-s", str(args.peer_warmup_s), "--peer-run-s", str(args.peer_run_s)]
        cmd += ["--peer", args.peer] if args.peer else []
    elif stage == "retry":
        cmd += ["--seeds", str(args.runs), "--seed", str(args.seed), "--target", str(args.target)]
    else:
        cmd += ["--profile-steps", str(args.profile_steps), "--ncu-kernels", str(args.ncu_kernels),
                "--seed", str(args.seed)]
    trainer = [*args.trainer_args, *extra]
    return cmd + (["--trainer-args", *trainer] if trainer else [])


def stage_budget(m: Measure, args: argparse.Namespace, stage: str) -> float:
    """The stage's budget, clipped to what ``--limit`` leaves (less a suite
    command's start and the caches' time)."""
    return min(getattr(args, f"{stage}_budget"), m.left() - START_S - KEEP_S)


def run_stage(m: Measure, args: argparse.Namespace, stage: str, extra: list[str] = ()) -> dict:
    """One stage: its suite command within the stage's budget; its record."""
    asked = getattr(args, f"{stage}_budget")
    budget = stage_budget(m, args, stage)
    entry: dict = {"stage": stage, "budget_s": round(budget, 1), "asked_s": asked, "started": now()}
    m.rec["stages"].append(entry)
    if budget < MIN_STAGE_S:
        entry.update(status="skipped", reason=f"{max(m.left(), 0):.0f} s left of --limit {args.limit:.0f}")
        m.log(f"{stage}: skipped ({entry['reason']})")
        m.save()
        return entry
    m.save()
    cmd = suite_command(args, stage, budget, list(extra))
    entry["trainer_args"] = cmd[cmd.index("--trainer-args") + 1:] if "--trainer-args" in cmd else []
    rc, seconds, _ = m.run(m, cmd, f"measure_{stage}.log", budget + START_S)
    part = m.suite()["parts"].get(PART_OF[stage]) or {}
    status = part.get("status") or ("stopped at the limit" if rc is None else "failed")
    entry.update(exit_status=rc, seconds=round(seconds, 1), status=status)
    if stage == "peer":
        m.rec["warmups"] = warmups(part)
    m.log(f"{stage}: {status} in {seconds:.0f} s (budget {budget:.0f} s)")
    m.save()
    return entry


def built_already(m: Measure) -> str | None:
    """Why the build stage need not run: an earlier command in --work (the
    background one) built the extension, or found it built, with its CUDA part."""
    part = m.suite()["parts"].get("build") or {}
    probe = part.get("after") or part.get("before") or {}
    if part.get("status") in ("done", "skipped") and probe.get("cuda"):
        return f"built by an earlier command (its build part: {part['status']} at {part.get('ended')})"
    return None


def warmups(peer: dict) -> list[dict]:
    """Each peer block's warm-ups: the published script's warm-up run (its
    max-autotune compile; its process's wall time beside it) and ours (paid
    by the block's first seed). Compared with a run whose caches were not
    restored, they say whether carrying them helped."""
    out = []
    for b in peer.get("blocks", []):
        theirs, ours = b.get("peer") or {}, (b.get("ours") or {}).get("runs") or []
        out.append({"order": b.get("order"),
                    "peer_warmup_s": (theirs.get("warmup") or {}).get("time_seconds"),
                    "peer_wall_s": theirs.get("wall_s"),
                    "ours_warmup_s": ours[0].get("warmup_s") if ours else None,
                    "ours_wall_s": (b.get("ours") or {}).get("wall_s")})
    return out


# -- the peer stage and what follows from it --------------------------------------------------------


def capture_off(m: Measure) -> list[str]:
    """``--set capture=off`` once a failure of our capture or our side was seen."""
    return CAPTURE_OFF if m.rec.get("capture", {}).get("off") else []


def saw_failure(m: Measure, why: str) -> None:
    cap = m.rec.setdefault("capture", {"off": False, "why": []})
    cap["off"] = True
    cap["why"].append(why)
    m.log(f"capture=off from now on: {why}")


def check_our_runs(m: Measure, sides: list[dict], where: str) -> bool:
    """Whether our side wrote no run.json after failing (then it is run
    again with capture=off); every run.json's capture failure and every
    failed side recorded, each turning capture off for later stages."""
    failed_before_writing = False
    for k, side in enumerate(sides):
        rc, runs = side.get("exit_status"), side.get("runs") or []
        for run in runs:
            done = plan.read_run_json(run.get("run_json") or "")
            m.rec.setdefault("our_step", plan.step_record(done))  # the first run's: captured, self-test
            why = plan.capture_failed(done)
            if why:
                saw_failure(m, f"{where}: run.json of seed {run.get('seed')} says capture failed: {why}")
        if rc not in (0, None) and not runs:  # None: stopped at the budget, which no retry would mend
            failed_before_writing = True
            saw_failure(m, f"{where}: our side (block {k}) exited {rc} before writing a run.json")
    return failed_before_writing


def run_peer(m: Measure, args: argparse.Namespace) -> None:
    """The peer stage: the compile mode chosen, ours then the published
    script, our side run again with capture=off where it wrote nothing,
    and the ratio recorded."""
    cache = m.out / "cache"
    given = plan.given_mode(args.trainer_args)
    warmed = plan.warmed_modes(cache, bool((m.rec.get("cache") or {}).get("restored")))
    mode, why = plan.choose_mode(given, warmed, stage_budget(m, args, "peer"), args.runs, estimates(args))
    m.rec["compile"] = {"mode": mode, "why": why, "warmed": warmed}
    m.log(f"compile mode {mode}: {why}")
    marker = plan.read_run_json(marker_path(cache, mode))
    if marker.get("capture_failed"):
        saw_failure(m, f"the warm-up in {mode} says capture failed: {marker['capture_failed']}")
    extra = ([] if given else ["--set", f"compile_mode={mode}"])
    entry = run_stage(m, args, "peer", extra + capture_off(m))
    if entry["status"] == "skipped":
        return
    part = m.suite()["parts"].get("peer") or {}
    blocks = part.get("blocks") or []
    ours = [b["ours"] for b in blocks if "ours" in b]
    peer_runs = [r for b in blocks for r in (b.get("peer") or {}).get("runs") or []]
    source, our_runs = "peer stage", [r for side in ours for r in side.get("runs") or []]
    if our_runs and not capture_off(m):
        write_marker(m, mode, "our runs in the peer stage")
    if check_our_runs(m, ours, "peer stage"):
        m.rec["retry"] = {"why": "our side wrote no run.json: run again with --set capture=off"}
        retry = run_stage(m, args, "retry", extra + capture_off(m))
        if retry["status"] != "skipped":
            trainer = m.suite()["parts"].get("trainer") or {}
            check_our_runs(m, [trainer], "retry")
            our_runs, source = trainer.get("runs") or [], "retry with --set capture=off"
        m.rec["retry"].update(status=retry["status"], runs=len(our_runs) if source != "peer stage" else 0)
    m.rec["ratio"] = {**plan.ratio_record(our_runs, peer_runs, args.target, args.min_runs, source),
                      "at_s": round(m.elapsed(), 1)}
    r = m.rec["ratio"]
    m.log(f"ratio {r['ratio_end_clock']} ({'valid' if r['valid'] else 'invalid: ' + r['invalid_why']})")
    m.save()


def probe_machine(m: Measure) -> dict:
    """torch's version and the GPU's name, asked in a child (this process
    never initialises CUDA: it would hold GPU memory through every stage)."""
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        m.log(f"probe failed: {r.stderr.strip().splitlines()[-1:]}")
        return {"torch": None, "gpu": None}


def prepare(m: Measure, args: argparse.Namespace) -> None:
    """The stamp and the caches, set for every command this one starts."""
    if not args.no_stamp:
        stamp = Path(os.environ.get(provenance.STAMP_ENV) or args.stamp).resolve()
        os.environ[provenance.STAMP_ENV] = str(stamp)  # absolute: the peer's runs start elsewhere
        m.rec["git"] = provenance.stamp_revision()
        m.log(f"source stamp {stamp}: commit {m.rec['git'].get('sha')}, dirty {m.rec['git'].get('dirty')}")
    cache = m.out / "cache"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
    m.rec["machine"] = probe_machine(m)
    name = carry.cache_name(m.rec["machine"].get("gpu"), m.rec["machine"].get("torch"))
    m.rec["cache"] = carry.restore_cache(Path(args.cache_from), name, cache)
    m.log("caches: " + (f"restored from {m.rec['cache']['from']}" if m.rec["cache"]["restored"]
                        else f"not restored ({m.rec['cache']['reason']})"))
    m.save()


def send(m: Measure, args: argparse.Namespace, with_cache: bool) -> None:
    """The returned files, made again from what the stages have written."""
    if not args.copy_to:
        return
    dest, max_bytes = Path(args.copy_to), int(args.max_file_mib * 2**20)
    sent = carry.send_back(m.out, dest, max_bytes)
    if with_cache and "cache" in m.rec:
        m.rec["cache_sent"] = carry.send_cache(m.out / "cache", dest, m.rec["cache"]["name"], max_bytes)
    m.rec["returned"] = {p.name: p.stat().st_size for p in sorted(dest.iterdir()) if p.is_file()}
    m.save()
    carry.copy_file(m.path, dest / "suite.json")  # with the record just made
    too_big = {k: v for k, v in sent.items() if v.get("bytes") is None}
    if too_big or len(m.rec["returned"]) > args.max_files:
        m.log(f"returned files over the limits: {too_big or m.rec['returned']}")


def run_stages(m: Measure, args: argparse.Namespace, stages: list[str]) -> None:
    for stage in stages:
        why = built_already(m) if stage == "build" else None
        if why:
            m.rec["stages"].append({"stage": "build", "status": "skipped", "reason": why, "budget_s": 0})
            m.log(f"build: skipped ({why})")
            m.save()
        elif stage == "warm":
            run_warm(m, args)
        elif stage == "peer":
            run_peer(m, args)
        else:
            run_stage(m, args, stage, capture_off(m))
        if stage != stages[-1]:  # the last stage's files are sent below, once
            send(m, args, with_cache=stage != "build")


def main(argv: list[str] | None = None, clock: Clock | None = None, run: Runner | None = None) -> int:
    """The command; ``clock`` and ``run`` replace the real ones in tests."""
    args = parser().parse_args(argv)
    clock = clock or SystemClock()
    t0 = clock.monotonic()  # --limit counts from here: the wait for the background is in it
    try:
        stages = check_args(args)
        if args.dry_run:
            os.environ["CUDA_VISIBLE_DEVICES"] = ""  # a dry run is the CPU's, even on a GPU machine
        args.work = Path(args.work).resolve()
        background = None
        if "warm" not in stages:
            background = await_background(args.work, min(args.warm_wait, args.limit / 2), clock)
        m = Measure(args.work, args.limit, clock, run, t0)
    except UsageError as e:
        print(f"measure: {e}", file=sys.stderr)
        return 2
    if background is not None:
        m.rec["background"] = background
    if "warm" in stages:  # this is the background command: the measuring one awaits it by this file
        atomic.write_json(args.work / BACKGROUND, {"pid": os.getpid(), "started": now(), "stages": stages})
    with stop_on_signals():
        try:
            prepare(m, args)
            run_stages(m, args, stages)
        except Stopped as e:
            m.rec.update(stopped_by=e.args[0], stopped=now())
            m.log(f"stopped by {e.args[0]}")
            send(m, args, with_cache=True)
            return 128 + e.signum
        finally:
            if "warm" in stages:
                bg = plan.read_run_json(args.work / BACKGROUND)
                atomic.write_json(args.work / BACKGROUND, {**bg, "ended": now()})
    m.rec["ended"] = now()
    m.save()
    send(m, args, with_cache=stages != ["build"])  # a build alone compiles nothing for Inductor
    print(summary(m.rec))
    ok = all(s["status"] in ("done", "skipped") for s in m.rec["stages"])
    return 0 if ok and (m.rec.get("ratio") or {}).get("ratio_end_clock", 0) is not None else 1


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def summary(rec: dict) -> str:
    """The table the command ends with (the command runner's reply shows the end of the output)."""
    lines = [f"commit {(rec.get('git') or {}).get('sha')}  gpu {rec['machine'].get('gpu')}  "
             f"torch {rec['machine'].get('torch')}  caches restored: {rec['cache']['restored']}"]
    bg = rec.get("background")
    if bg and bg.get("found"):
        lines.append(f"  background warm-up: waited {bg['waited_s']:.0f} s, {bg['ended']}, "
                     f"warmed {', '.join(bg['modes_warmed']) or 'none'}")
    lines += [f"  {s['stage']:8} {s['status']:22} {s.get('seconds', 0):6.0f} s of {s['budget_s']:.0f}"
              for s in rec["stages"]]
    if "compile" in rec:
        lines.append(f"  compile mode {rec['compile']['mode']}: {rec['compile']['why']}")
    lines += [f"  block {i}: peer warm-up {w['peer_warmup_s']} s (wall {w['peer_wall_s']} s), "
              f"ours {w['ours_warmup_s']} s" for i, w in enumerate(rec.get("warmups", []))]
    if rec.get("capture", {}).get("off"):
        lines.append(f"  capture=off: {'; '.join(rec['capture']['why'])}")
    if "retry" in rec:
        lines.append(f"  retry: {rec['retry']['why']} -> {rec['retry'].get('status')}")
    r = rec.get("ratio")
    if r:
        ratio = "none" if r["ratio_end_clock"] is None else f"{r['ratio_end_clock']:.3f}"
        lines += [f"  RATIO ours/peer end clock {ratio}  ({r['source']}; "
                  + ("valid" if r["valid"] else f"INVALID: {r['invalid_why']}") + ")",
                  f"    ours: mean top-1 {_pct(r['ours']['mean_top1'])}, reached {r['ours']['reached']}"
                  f" of {r['ours']['runs']}",
                  f"    peer: mean tta_val_acc {_pct(r['peer']['mean_tta_val_acc'])}, reached "
                  f"{r['peer']['reached']} of {r['peer']['runs']}"]
    lines += [f"  returned: {name} {size / 2**20:.2f} MiB" for name, size in rec.get("returned", {}).items()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
