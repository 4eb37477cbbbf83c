"""The prepared measuring script (issue 45): what a session with a lent GPU
runs first, once CIFAR-10 and the published script are on the machine
(DEVELOPERS.md says how they travel), in one command that ends inside the
machine's ten-minute limit:

    python3 -m dawnbench_fast.gpu_suite.measure --work W --copy-to OUT \\
        --data-dir CIFAR_DIR --peer PATH/airbench94_muon.py

In order, each stage one command of the GPU suite (suite.py) filling
W/suite.json as it goes:

0. the source stamp (``--stamp``, default .gpu/kit/source.json): every
   command and run records the commit the files were carried from, whatever
   the machine's copy of .git says; no stamp, no measurement (``--no-stamp``);
   and the compile caches of the last run on the same GPU model and torch
   version, restored from ``--cache-from`` (default .gpu/cache) into W/cache,
   which Inductor and Triton then use for every command;
1. ``build``: the extension (skipped where it already loads with its CUDA
   part, e.g. built while the data travelled);
2. ``peer``: the published script once (``AIRBENCH_RUNS=--runs``, its
   max-autotune warm-up included), then our trainer for ``--runs`` seeds in
   one process; a second block, in the other order, only if the stage's
   budget still holds one;
3. ``profile``: the timed step profiled (``--profile-steps``) through the
   roofline report.

Each stage keeps to its budget (``--build-budget`` ...) and all of them to
``--limit`` (540 s). After each, the files that matter go to ``--copy-to``
(carry.py), so a command stopped at its limit keeps what it finished; the
caches go there last, named for the GPU and torch version, to be carried
next time. suite.json's ``measure`` says which stages ran and how long,
which commit, whether the caches were restored, and each block's warm-ups:
the published script's and ours, so one can say whether the caches helped.
``--dry-run`` goes through all of it on the CPU at tiny sizes (the suite's
dry run: a stand-in for the published script, a one-step profile).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from dawnbench_fast import atomic
from dawnbench_fast.gpu_suite import carry
from dawnbench_fast.gpu_suite.record import (
    SCHEMA_VERSION,
    Stopped,
    UsageError,
    add_trainer_args,
    comma_list,
    now,
    read_suite,
    run_logged,
    stop_on_signals,
)
from dawnbench_fast.reporting import provenance

STAGES = ("build", "peer", "profile")
PART_OF = {"build": "build", "peer": "peer", "profile": "roofline"}  # the suite part each stage runs
LIMIT_S = 540.0  # the command's, all stages together: a lent machine cuts a command at 600 s
START_S = 45.0  # a suite command's time beyond its part's budget: torch's import, the environment
KEEP_S = 20.0  # kept back at the end for the caches' tarball
MIN_STAGE_S = 20.0  # a stage with less than this left is skipped, not started
PROBE = ("import json, torch; print(json.dumps({'torch': torch.__version__, 'gpu': "
         "torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))")


class Measure:
    """The command's folder, its log (lines appended to suite.log beside the
    suite's own) and its record, suite.json's ``measure``, merged into the
    file between the suite's commands (never held across one: they rewrite it)."""

    def __init__(self, work: Path, limit_s: float):
        self.out, self.limit_s, self.t0 = work, limit_s, time.monotonic()
        self.path, self.log_path = work / "suite.json", work / "suite.log"
        work.mkdir(parents=True, exist_ok=True)
        data = read_suite(self.path) if self.path.exists() else \
            {"schema_version": SCHEMA_VERSION, "commands": [], "parts": {}}
        if "measure" in data:  # an earlier command in this folder (the build, while the data travelled)
            data.setdefault("measure_earlier", []).append(data.pop("measure"))
        self.rec: dict = {"started": now(), "argv": sys.argv[1:], "stages": []}
        atomic.write_json(self.path, {**data, "measure": self.rec})

    def left(self) -> float:
        return self.limit_s - (time.monotonic() - self.t0)

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
    p = argparse.ArgumentParser(prog="python -m dawnbench_fast.gpu_suite.measure",
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
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, of {', '.join(STAGES)}")
    p.add_argument("--limit", type=float, default=LIMIT_S, metavar="S", help="seconds for everything")
    p.add_argument("--build-budget", type=float, default=150.0, metavar="S")
    p.add_argument("--peer-budget", type=float, default=300.0, metavar="S",
                   help="the published script once and our seeds; a second block only within it")
    # the profile runs the trainer's own warm-up (compile, capture) first: the peer stage's caches shorten it
    p.add_argument("--profile-budget", type=float, default=90.0, metavar="S")
    p.add_argument("--runs", type=int, default=10, help="the published script's runs and our seeds, a block")
    p.add_argument("--blocks", type=int, default=2, help="blocks at most (the second only if time remains)")
    p.add_argument("--seed", type=int, default=0, help="our first seed")
    p.add_argument("--profile-steps", type=int, default=3)
    p.add_argument("--ncu-kernels", type=int, default=0, help="ncu on the profile's top kernels (0: none)")
    p.add_argument("--dry-run", action="store_true", help="every stage on the CPU at tiny sizes, no timing")
    add_trainer_args(p)
    return p


def check_args(args: argparse.Namespace) -> list[str]:
    named = comma_list(args.stages, STAGES, "--stages", "stages")
    stages = [s for s in STAGES if s in named]  # always in the script's order, whatever the flag's
    budgets = (args.limit, args.build_budget, args.peer_budget, args.profile_budget)
    if not all(0 < b < math.inf for b in budgets) or min(args.runs, args.blocks, args.profile_steps) < 1:
        raise UsageError("--limit, the budgets, --runs, --blocks, --profile-steps: must be positive "
                         "(and finite)")
    if not args.no_stamp and not os.environ.get(provenance.STAMP_ENV) and not Path(args.stamp).is_file():
        raise UsageError(f"--stamp {args.stamp}: no source stamp, so the commit measured would not be known; "
                         "make it where the files come from (python -m dawnbench_fast.reporting.provenance "
                         "stamp .gpu/kit/source.json) and carry it, or give --no-stamp")
    if "peer" in stages and not args.dry_run and not (args.peer and Path(args.peer).is_file()):
        raise UsageError(f"--peer {args.peer}: the published airbench94_muon.py is needed by the peer stage")
    if args.data_dir and not Path(args.data_dir).is_dir():
        raise UsageError(f"--data-dir {args.data_dir}: no such folder")
    return stages


def suite_command(args: argparse.Namespace, stage: str, budget: float) -> list[str]:
    """The GPU suite's command for ``stage`` with ``budget`` seconds for its part."""
    cmd = [sys.executable, "-m", "dawnbench_fast.gpu_suite", "--out", str(args.work),
           "--part-budget", f"{budget:.0f}", "--only", PART_OF[stage]]
    cmd += ["--dry-run"] if args.dry_run else []
    if stage == "build":
        return cmd
    cmd += ["--data-dir", args.data_dir] if args.data_dir else []
    if stage == "peer":
        cmd += ["--peer-first", "--peer-runs", str(args.runs), "--peer-blocks", str(args.blocks),
                "--seed", str(args.seed)] + (["--peer", args.peer] if args.peer else [])
    else:
        cmd += ["--profile-steps", str(args.profile_steps), "--ncu-kernels", str(args.ncu_kernels),
                "--seed", str(args.seed)]
    return cmd + (["--trainer-args", *args.trainer_args] if args.trainer_args else [])


def run_stage(m: Measure, args: argparse.Namespace, stage: str) -> dict:
    """One stage: its suite command within the stage's budget, clipped to
    what ``--limit`` leaves (less the caches' time); its record."""
    asked = getattr(args, f"{stage}_budget")
    budget = min(asked, m.left() - START_S - KEEP_S)
    entry: dict = {"stage": stage, "budget_s": round(budget, 1), "asked_s": asked, "started": now()}
    m.rec["stages"].append(entry)
    if budget < MIN_STAGE_S:
        entry.update(status="skipped", reason=f"{max(m.left(), 0):.0f} s left of --limit {args.limit:.0f}")
        m.log(f"{stage}: skipped ({entry['reason']})")
        m.save()
        return entry
    m.save()
    cmd = suite_command(args, stage, budget)
    rc, seconds, _ = run_logged(m, cmd, f"measure_{stage}.log", budget + START_S)
    part = m.suite()["parts"].get(PART_OF[stage]) or {}
    status = part.get("status") or ("stopped at the limit" if rc is None else "failed")
    entry.update(exit_status=rc, seconds=round(seconds, 1), status=status)
    if stage == "peer":
        m.rec["warmups"] = warmups(part)
    m.log(f"{stage}: {status} in {seconds:.0f} s (budget {budget:.0f} s)")
    m.save()
    return entry


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
    dest = Path(args.copy_to)
    sent = carry.send_back(m.out, dest)
    if with_cache and "cache" in m.rec:
        m.rec["cache_sent"] = carry.send_cache(m.out / "cache", dest, m.rec["cache"]["name"])
    m.rec["returned"] = {p.name: p.stat().st_size for p in sorted(dest.iterdir()) if p.is_file()}
    m.save()
    carry.copy_file(m.path, dest / "suite.json")  # with the record just made
    too_big = {k: v for k, v in sent.items() if v.get("bytes") is None}
    if too_big or len(m.rec["returned"]) > carry.MAX_FILES:
        m.log(f"returned files over the limits: {too_big or m.rec['returned']}")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        stages = check_args(args)
        if args.dry_run:
            os.environ["CUDA_VISIBLE_DEVICES"] = ""  # a dry run is the CPU's, even on a GPU machine
        args.work = Path(args.work).resolve()
        m = Measure(args.work, args.limit)
    except UsageError as e:
        print(f"measure: {e}", file=sys.stderr)
        return 2
    with stop_on_signals():
        try:
            prepare(m, args)
            for stage in stages:
                run_stage(m, args, stage)
                if stage != stages[-1]:  # the last stage's files are sent below, once
                    send(m, args, with_cache=stage != "build")
        except Stopped as e:
            m.rec.update(stopped_by=e.args[0], stopped=now())
            m.log(f"stopped by {e.args[0]}")
            send(m, args, with_cache=True)
            return 128 + e.signum
    m.rec["ended"] = now()
    m.save()
    send(m, args, with_cache=stages != ["build"])  # a build alone compiles nothing for Inductor
    print(summary(m.rec))
    return 0 if all(s["status"] in ("done", "skipped") for s in m.rec["stages"]) else 1


def summary(rec: dict) -> str:
    """The table the command ends with (a lent machine's reply shows the end of the output)."""
    lines = [f"commit {(rec.get('git') or {}).get('sha')}  gpu {rec['machine'].get('gpu')}  "
             f"torch {rec['machine'].get('torch')}  caches restored: {rec['cache']['restored']}"]
    lines += [f"  {s['stage']:8} {s['status']:22} {s.get('seconds', 0):6.0f} s of {s['budget_s']:.0f}"
              for s in rec["stages"]]
    lines += [f"  block {i}: peer warm-up {w['peer_warmup_s']} s (wall {w['peer_wall_s']} s), "
              f"ours {w['ours_warmup_s']} s" for i, w in enumerate(rec.get("warmups", []))]
    lines += [f"  returned: {name} {size / 2**20:.2f} MiB" for name, size in rec.get("returned", {}).items()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
