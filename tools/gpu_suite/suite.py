"""Measure the project on a GPU in one command: the environment, the extension
build, the CIFAR-10 trainer's time to 94%, the published recipe beside it,
every custom op against torch, and a roofline of the training step.

    python -m tools.gpu_suite --out DIR [--only build,trainer,peer,ops,roofline]
                                       [--peer PATH/airbench94_muon.py] [--data-dir CIFAR_DIR]
    python -m tools.gpu_suite --out DIR --dry-run      # every part on tiny shapes, no timing (CPU)

Each part is one step of a measurement campaign on a GPU machine reached by
a command runner that cuts each command at ten minutes, so each keeps to ``--part-budget``
seconds (default 540) and writes what it measured as it goes: DIR/suite.json
(docs/GPU_SUITE.md documents its keys) is rewritten atomically after every
measurement and DIR/suite.log is appended to, so a command stopped at its limit
leaves everything it finished. Several commands with the same ``--out``
(one part each) fill the same suite.json.

``--dry-run`` goes through every part on the CPU at tiny sizes: a few training
steps, one block of a stand-in for the published script (gpu_suite/peer_standin.py:
no compile, no CUDA), each op once, a one-step profile. It checks the plumbing,
not the speed; the tests run it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from tools.gpu_suite.record import (
    Stopped,
    Suite,
    UsageError,
    add_trainer_args,
    comma_list,
    gpu_missing,
    now,
    run_logged,
    stop_on_signals,
    tail,
)
from tools.gpu_suite.roofline_part import part_roofline
from tools.gpu_suite.training_parts import part_peer, part_trainer

REPO = Path(__file__).resolve().parents[2]  # the checkout the build part installs
PARTS = ("build", "trainer", "peer", "ops", "roofline")
PART_BUDGET_S = 540.0  # a command runner cuts a command at 600 s: leave room for start and copy-back


# -- environment ----------------------------------------------------------------------------------


def version_of(module: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return None
    try:
        return getattr(__import__(module), "__version__", "unknown")
    except Exception as e:  # noqa: BLE001 - a broken install is a finding, not a crash
        return f"import failed: {type(e).__name__}"


def environment() -> dict:
    """The GPU as NVML reports it (name, driver, clocks, power limit), the
    versions that matter, and whether nvtx imports (Nsight's ranges)."""
    import torch

    from dawnbench_fast.hardware import gpu_info
    from dawnbench_fast.reporting import bench

    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    try:
        import nvtx  # noqa: F401

        nvtx_ok, nvtx_why = True, None
    except Exception as e:  # noqa: BLE001
        nvtx_ok, nvtx_why = False, f"{type(e).__name__}: {e}"
    return {
        "recorded": now(), "device": str(device), "gpu": gpu_info.gpu_record(device),
        "cuda_runtime": torch.version.cuda, "python": platform.python_version(),
        "torch": torch.__version__, "triton": version_of("triton"), "numpy": version_of("numpy"),
        "nvtx_imports": nvtx_ok, "nvtx_error": nvtx_why, "git": bench.git_revision(),
        "host": platform.node(), "cpu": platform.processor() or platform.machine(),
        "ncu": shutil.which("ncu"), "nsys": shutil.which("nsys"), "nvcc": shutil.which("nvcc"),
        "missing_dependencies": missing_dependencies(),
    }


def missing_dependencies(dist: str = "dawnbench-fast") -> list[str]:
    """The package's required distributions (extras left out) that are not
    installed. The build part installs with ``--no-deps``, and a GPU image
    without network may lack one (the first H200 run's image had no ``nvtx``),
    which would otherwise surface as an ImportError inside every trainer run."""
    from importlib import metadata

    try:
        requires = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return []  # not installed: the build part (or README's set-up) comes first
    missing = []
    for req in requires:
        if "extra ==" in req:
            continue
        name = re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0]
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


# -- build ----------------------------------------------------------------------------------------

EXT_PROBE = ("import json; from dawnbench_fast.csrc import native; r = native.unavailable_reason(); "
             "ext = None if r else native.load(); "
             "print(json.dumps({'extension': r is None, 'reason': r, "
             "'cuda': bool(getattr(ext, 'has_cuda', False)), "
             "'cpu_path': ext.cpu_path() if ext is not None else None}))")


def probe_extension(suite: Suite, name: str) -> dict:
    rc, _, log = run_logged(suite, [sys.executable, "-c", EXT_PROBE], name, 120, cwd=suite.out)
    last = log.read_text().strip().splitlines()[-1:] if log.exists() else []
    try:
        return json.loads(last[0]) if rc == 0 and last else {"extension": False, "reason": tail(log)}
    except json.JSONDecodeError:
        return {"extension": False, "reason": tail(log)}


def part_build(suite: Suite, args: argparse.Namespace) -> None:
    """Build the extension where the suite runs (``pip install --no-deps
    --no-build-isolation -e .``, the command that worked on the H100) and time
    it; skipped when the extension already loads with its CUDA part, unless
    ``--rebuild``. A dry run only probes (a build takes minutes on 2 cores)."""
    rec = suite.part("build")
    rec["before"] = probe_extension(suite, "build_probe_before.log")
    if suite.dry_run:
        return suite.end("build", "skipped", "dry run: the build is not run, only probed")
    if rec["before"].get("cuda") and not args.rebuild:
        return suite.end("build", "skipped", "the extension already loads with its CUDA part (--rebuild)")
    cmd = [sys.executable, "-m", "pip", "install", "-v", "--no-deps", "--no-build-isolation", "-e", str(REPO)]
    rc, seconds, log = run_logged(suite, cmd, "build.log", suite.left(), cwd=REPO)
    rec.update(command=" ".join(cmd[1:]), build_seconds=round(seconds, 1), exit_status=rc)
    rec["built"] = [ln.strip() for ln in log.read_text(errors="replace").splitlines()
                    if "dawnbench_fast._C" in ln and ("built" in ln or "build" in ln)][-4:]
    rec["after"] = probe_extension(suite, "build_probe_after.log")
    suite.end("build", "done" if rc == 0 else "failed", None if rc == 0 else tail(log))


# -- ops and roofline -----------------------------------------------------------------------------


def part_ops(suite: Suite, args: argparse.Namespace) -> None:
    """Every custom op at the recipe's shapes: torch eager, torch.compile and
    our Triton and CUDA faces (CPU face in a dry run), with their error
    against torch eager (gpu_suite/ops.py)."""
    from tools.gpu_suite import ops as gpu_suite_ops

    ops = set(args.ops.split(",")) if args.ops else None
    # an ops part split over commands (--ops) keeps the other ops' cases of the earlier ones
    before = (suite.data["parts"].get("ops") or {}) if ops else {}
    rec = suite.part("ops")
    rec["cases"] = [c for c in before.get("cases", []) if c["op"] not in ops] if ops else []
    if "host_us" in before:  # measured with bn_act's cases; kept unless measured again
        rec["host_us"] = before["host_us"]

    def add(case: dict) -> None:
        rec["cases"].append(case)
        suite.save()
        shown = "n/a" if case.get("median_ms") is None else f"{case['median_ms']:.4f} ms"
        suite.log(f"[ops] {case['case']} {case['impl']}: {shown} {case.get('status', '')}")

    rec.update(gpu_suite_ops.run_cases(add, dry_run=suite.dry_run, deadline=lambda: suite.left() < 5,
                                       ops=ops))
    write_winners(suite, Path(args.winners_out) if args.winners_out else suite.out / "kernel_winners.json")
    suite.end("ops", "stopped at the budget" if rec.get("stopped") else "done")


def write_winners(suite: Suite, path: Path) -> None:
    """The committed winners table with this GPU's entry from the ops part
    merged in (kernel_winners.py): copy it to dawnbench_fast/kernel_winners.json
    and commit it, and ``--kernels auto`` takes these winners on this GPU model.
    An ops part split over two commands (``--ops``) merges its cases first."""
    from dawnbench_fast import kernel_winners

    name = "dry run (no GPU)" if suite.dry_run else None
    gpu, table = kernel_winners.updated_table(kernel_winners.load_table(), suite.data, name)
    kernel_winners.write_table(table, path)
    picks = ", ".join(f"{op}: {r['winner']}" for op, r in table["gpus"][gpu]["ops"].items())
    suite.log(f"[ops] winners on {gpu} ({picks}) written to {path}")


# -- command line ---------------------------------------------------------------------------------

RUNS_TRAINER = ("trainer", "peer", "roofline")  # the parts that start our trainer
RUNNERS: dict[str, Callable[[Suite, argparse.Namespace], None]] = {
    "build": part_build, "trainer": part_trainer, "peer": part_peer, "ops": part_ops,
    "roofline": part_roofline}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.gpu_suite",
                                description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", required=True, help="folder of suite.json, suite.log and the runs' files")
    p.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts of {', '.join(PARTS)} "
                   "(peer needs --peer, except in a dry run)")
    p.add_argument("--peer", metavar="PATH", help="the published airbench94_muon.py, run unchanged")
    p.add_argument("--data-dir", help="CIFAR-10 folder (binary or cifar-10-batches-py layout; "
                   "default: the trainer's own lookup, $DAWNBENCH_DATA first)")
    p.add_argument("--dry-run", action="store_true", help="every part on tiny shapes on the CPU, no timing")
    p.add_argument("--part-budget", type=float, default=PART_BUDGET_S, metavar="S", help="seconds per part")
    p.add_argument("--seeds", type=int, default=3, help="trainer part: seeds in one process")
    p.add_argument("--seed", type=int, default=0, help="trainer part: the first seed")
    p.add_argument("--peer-runs", type=int, default=3, help="peer part: runs per block, each side")
    p.add_argument("--peer-blocks", type=int, default=2, help="peer part: blocks per side (if time allows)")
    p.add_argument("--peer-first", action="store_true",
                   help="peer part: the published script opens the first block (else ours does)")
    p.add_argument("--peer-warmup-s", type=float, default=155.0, metavar="S",
                   help="peer part: the published script's warm-up, counted on when fitting its runs to "
                   "the time left (an H200's, cold caches)")
    p.add_argument("--peer-run-s", type=float, default=6.0, metavar="S",
                   help="peer part: one of its runs, counted on likewise")
    p.add_argument("--latency-images", type=int, default=1000, help="trainer: images timed one at a time")
    p.add_argument("--target", type=float, default=0.94, help="the accuracy both sides are held to")
    p.add_argument("--profile-steps", type=int, default=3, help="roofline part: profiled steps")
    p.add_argument("--ncu-kernels", type=int, default=5, help="roofline part: top kernels ncu measures "
                   "(0: no ncu)")
    p.add_argument("--ops", metavar="OP[,OP]", help="ops part: only these catalogued ops (default: all; "
                   "torch.compile compiles each case, so a slow host may need two commands)")
    p.add_argument("--winners-out", metavar="PATH",
                   help="ops part: where the winners table goes (default DIR/kernel_winners.json): the "
                        "committed table with this GPU's entry merged in, to copy to "
                        "dawnbench_fast/kernel_winners.json")
    p.add_argument("--rebuild", action="store_true", help="build part: build even if the extension loads")
    add_trainer_args(p)
    return p


def check_args(args: argparse.Namespace) -> list[str]:
    parts = comma_list(args.only, PARTS, "--only", "parts")
    if args.ops:
        # read from the source tree (python -m from the root) when the package is not installed yet
        from dawnbench_fast.dispatch import CATALOGUE

        unknown = sorted(set(args.ops.split(",")) - set(CATALOGUE))
        if unknown:
            raise UsageError(f"--ops {args.ops}: {', '.join(unknown)} not catalogued; ops are "
                             f"{', '.join(CATALOGUE)}")
    if args.peer and not Path(args.peer).is_file():
        raise UsageError(f"--peer {args.peer}: no such file; give the published airbench94_muon.py")
    if "peer" in parts and not args.peer and not args.dry_run:
        if args.only != ",".join(PARTS):
            raise UsageError("--only peer needs --peer PATH (the published airbench94_muon.py)")
        parts.remove("peer")  # the default set: the comparison only when a peer is given
    if args.data_dir and not Path(args.data_dir).is_dir():
        raise UsageError(f"--data-dir {args.data_dir}: no such folder")
    # written so that nan and inf fail: float() reads them, and a budget of either never runs out
    if min(args.seeds, args.peer_runs, args.peer_blocks, args.profile_steps) < 1 or \
            not 0 < args.part_budget < math.inf:
        raise UsageError("--seeds, --peer-runs, --peer-blocks, --profile-steps, --part-budget: "
                         "must be positive (and finite)")
    for flag, value in (("--peer-warmup-s", args.peer_warmup_s), ("--peer-run-s", args.peer_run_s)):
        if not 0 < value < math.inf:
            raise UsageError(f"{flag} {value}: must be positive (and finite)")
    if not 0 < args.target <= 1:
        raise UsageError(f"--target {args.target}: must be in (0, 1], a fraction: 0.94 means 94%")
    return parts


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        parts = check_args(args)
    except UsageError as e:
        print(f"gpu_suite: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # a dry run is the CPU's, even on a GPU machine
    elif (missing := gpu_missing("gpu_suite")) is not None:  # before anything is built, run or written
        print(missing, file=sys.stderr)
        return 2
    try:
        suite = Suite(Path(args.out), args.dry_run, args.part_budget)
    except UsageError as e:  # a damaged suite.json in --out: left as it was
        print(f"gpu_suite: {e}", file=sys.stderr)
        return 2
    suite.data["commands"].append({"argv": sys.argv[:1] + (argv if argv is not None else sys.argv[1:]),
                                   "started": now(), "parts": parts})
    # A stop signal (a scheduler's TERM, ^C, HUP) ends the runs the suite started, which run in
    # sessions of their own, records the stop and exits 128 + the signal's number.
    with stop_on_signals():
        try:
            failed = run_parts(suite, args, parts)
        except Stopped as e:
            suite.stopped(e.signum)
            return 128 + e.signum
    suite.log(f"suite.json: {suite.path}" + (f" (failed: {', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


def run_parts(suite: Suite, args: argparse.Namespace, parts: list[str]) -> list[str]:
    """Run ``parts`` in order, each recorded in suite.json; returns those that failed."""
    failed = []
    for name in parts:
        if name != "build" and "recorded" not in suite.data["commands"][-1]:
            # read after the build part, which may be what makes the package importable
            suite.data["environment"] = environment()
            suite.data["commands"][-1]["recorded"] = suite.data["environment"]["recorded"]
            suite.save()
        missing = suite.data["environment"].get("missing_dependencies") if name in RUNS_TRAINER else None
        if missing:  # one line now, not an ImportError in every trainer run
            suite.part(name)
            suite.end(name, "failed", f"the package's dependencies {', '.join(missing)} are not installed: "
                      f"pip install them (without network, carry their wheels) and run again")
            failed.append(name)
            continue
        try:
            RUNNERS[name](suite, args)
        except Exception as e:  # noqa: BLE001 - one part's failure is recorded; the next still runs
            if name not in suite.data["parts"]:  # it failed before its record was opened
                suite.part(name)
            suite.end(name, "failed", f"{type(e).__name__}: {e}")
        if suite.data["parts"][name]["status"] == "failed":
            failed.append(name)
    return failed


if __name__ == "__main__":
    sys.exit(main())
