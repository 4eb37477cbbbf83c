"""The flags every analysis shares, the output folder, and the trainer flags
every run of a study gets.

Trainer flags for every run of a study follow ``--`` on the command line
(``... stability --runs 5 -- --kernels torch --set widths=32,64,64``); they
come after the study's own and before each arm's, so they override the
study's defaults and an arm still changes what it is about.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from dawnbench_fast.analyze.run_records import RunRecord, read_runs
from dawnbench_fast.analyze.training_runs import RUNS_FOLDER, Arm, Failure, train_arms
from dawnbench_fast.cifar.recipe import RECIPES
from dawnbench_fast.config.overrides import ConfigError, finite_float
from dawnbench_fast.runner.cli import check_out_dir, claim_out_dir

PROG = "python -m dawnbench_fast.analyze"
DEFAULT_OUT = Path("runs/analysis")
DAWNBENCH_TARGET = 0.94
# --quick: a look within minutes on 2 CPU cores, not a result: a subset,
# two epochs, a target such short training reaches, fewer runs; the whitening
# sample cut to the subset (the recipe's 5,000 would be refused).
QUICK_FLAGS = ["--subset", "2000", "--eval-subset", "1000", "--epochs", "2", "--set", "whiten_images=2000"]
QUICK_BATCH = ["--batch-size", "500"]  # 4 steps an epoch on the subset, not 1 (batch-size sets its own)
QUICK_TARGET = 0.35
QUICK_RUNS = 2


def comma_list(flag: str, text: str, convert: type, example: str, in_range, range_text: str) -> tuple:
    """``flag``'s comma-separated values, converted, checked and sorted; a
    one-line error naming the flag for a value that does not convert, is out
    of range (``in_range(v)`` false) or is repeated."""
    try:
        values = [convert(v) for v in text.split(",")]
    except ValueError:
        raise ConfigError(f"{flag} {text}: expected comma-separated values, e.g. {example}") from None
    if not all(in_range(v) for v in values):
        raise ConfigError(f"{flag} {text}: {range_text}")
    if len(set(values)) != len(values):
        raise ConfigError(f"{flag} {text}: a value is repeated")
    return tuple(sorted(values))


def split_trainer_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the analysis's own arguments, the trainer flags after ``--``)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def add_common_args(p: argparse.ArgumentParser) -> None:
    """--out, --overwrite, --quick: every command has them."""
    p.add_argument("--out", default=None, help="folder for the JSON, PNG and text report (and a study's "
                   f"runs/); must be new or empty unless --overwrite (default: a new {DEFAULT_OUT}/"
                   "<UTC time>-<command>)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into a non-empty --out, replacing files of the same names")
    p.add_argument("--quick", action="store_true",
                   help="reduced budget for a quick look: trainer flags "
                   f"{' '.join(QUICK_FLAGS + QUICK_BATCH)} (batch-size keeps its sizes), target "
                   f"{QUICK_TARGET} unless --target, {QUICK_RUNS} runs unless --runs (not a result)")


def add_study_args(p: argparse.ArgumentParser, runs: int, target: float) -> None:
    """The flags of a command that trains runs or reads them back."""
    p.add_argument("--from", dest="sources", nargs="+", metavar="DIR", default=None,
                   help="read finished runs (run folders, their run.json, or folders above them such "
                   "as a --runs N folder or an analysis's runs/) instead of training")
    p.add_argument("--recipe", choices=sorted(RECIPES), default=None,
                   help="the trainer's named recipe (default: its default, dawnbench_fast)")
    p.add_argument("--runs", type=int, default=None, metavar="N",
                   help=f"seeds per configuration (default {runs}; {QUICK_RUNS} with --quick)")
    p.add_argument("--seed", type=int, default=0, help="first seed (seeds seed..seed+N-1)")
    p.add_argument("--target", type=finite_float, default=None,
                   help=f"top-1 target, a fraction (default {target}; {QUICK_TARGET} with --quick; "
                   "with --from, the runs' own)")
    p.add_argument("--data-dir", default=None, help="CIFAR-10 folder, passed to the trainer")
    p.add_argument("--resume", metavar="DIR", default=None,
                   help="go on with the study whose --out was DIR: finished runs are read back, "
                   "interrupted ones go on from their last epoch")
    p.set_defaults(default_runs=runs, default_target=target)


def resolve_out(args: argparse.Namespace, command: str) -> Path:
    """The analysis's output folder: --resume's, else --out, else a new one;
    refused if it holds files, unless --overwrite or resuming (the rule of
    the trainer's --out, dawnbench_fast.runner.cli.check_out_dir). It is
    claimed for this study (runner/claim.py; ``args.out_claim``, released by
    :func:`release_out`): of two studies started together into one --out,
    one runs; a default folder another study took moves on to ``-2``, ``-3`` ..."""
    resume = getattr(args, "resume", None)
    fresh = False
    if resume is not None:
        if args.out is not None and Path(args.out).resolve() != Path(resume).resolve():
            raise ConfigError(f"--resume {resume} with --out {args.out}: a resumed study writes into its "
                              "own folder; drop --out")
        if not Path(resume).is_dir():
            raise ConfigError(f"--resume {resume}: no such folder; pass the --out of the study to go on with")
        out = Path(resume)
    elif args.out is not None:
        out = Path(args.out)
    else:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        out, fresh = DEFAULT_OUT / f"{stamp}-{command}", True
    # the file, path and disk checks' own words first; emptiness is settled once claimed
    check_out_dir(out, args.overwrite or fresh, resuming=resume is not None)
    names = (DEFAULT_OUT / f"{out.name}-{k}" for k in itertools.count(2))
    out, args.out_claim = claim_out_dir(out, args.overwrite, resume is not None,
                                        (lambda: next(names)) if fresh else None)
    return out


def release_out(args: argparse.Namespace) -> None:
    """Give back the folder :func:`resolve_out` claimed, if it did (the end of the command)."""
    held = getattr(args, "out_claim", None)
    if held is not None:
        held.release()


def check_study_args(args: argparse.Namespace) -> None:
    """Ranges argparse does not check, before anything is read or trained."""
    if args.runs is not None and args.runs < 1:
        raise ConfigError(f"--runs {args.runs}: must be >= 1")
    if args.seed < 0:
        raise ConfigError(f"--seed {args.seed}: must be >= 0")
    # `not 0 < x <= 1` so that nan fails too
    if args.target is not None and not 0.0 < args.target <= 1.0:
        raise ConfigError(f"--target {args.target}: must be in (0, 1], a fraction: 0.94 means 94%")
    if args.sources is not None and (args.resume is not None or args.trainer_args):
        raise ConfigError("--from reads finished runs: it takes no --resume and no trainer flags after --")


def runs_per_arm(args: argparse.Namespace) -> int:
    if args.runs is not None:
        return args.runs
    return QUICK_RUNS if args.quick else args.default_runs


def seeds(args: argparse.Namespace) -> list[int]:
    return list(range(args.seed, args.seed + runs_per_arm(args)))


def study_target(args: argparse.Namespace) -> float:
    """The target of runs this study trains."""
    if args.target is not None:
        return args.target
    return QUICK_TARGET if args.quick else args.default_target


def target_of_runs(args: argparse.Namespace, targets: set[float]) -> float:
    """The target read runs are judged by: --target, else their own (one)."""
    if args.target is not None:
        return args.target
    if len(targets) != 1:
        raise ConfigError(f"--from: the runs were trained for different targets ({sorted(targets)}); "
                          "pass --target")
    return targets.pop()


def target_note(target: float) -> str:
    """What a target below DAWNBench's 94% means for the figures."""
    if target >= DAWNBENCH_TARGET:
        return f"target {100 * target:.2f}% top-1 (DAWNBench's CIFAR-10 target is 94%)"
    return (f"target {100 * target:.2f}% top-1, below DAWNBench's 94% (--target {DAWNBENCH_TARGET} for "
            "the full target): times are to this lower target, not DAWNBench times")


def trainer_base(args: argparse.Namespace, target: float, extra: Sequence[str] = (),
                 quick_batch: bool = True) -> list[str]:
    """The trainer flags of every run of the study: no progress bar (the
    study prints its own lines), no latency (no analysis reads it; `--
    --latency-images N` turns it back on), the target, --quick's reductions
    (its batch only with ``quick_batch``: a batch-size study's base batch is
    the recipe's, which its learning rates were tuned for), the study's
    ``extra`` (e.g. --eval-every 1), then the user's after --."""
    argv = ["--no-progress", "--latency-images", "0", "--target", str(target)]
    if args.recipe is not None:  # left out otherwise: the trainer refuses --recipe beside --config
        argv += ["--recipe", args.recipe]
    if args.quick:
        argv += QUICK_FLAGS + (QUICK_BATCH if quick_batch else [])
    if args.data_dir is not None:
        argv += ["--data-dir", args.data_dir]
    return [*argv, *extra, *args.trainer_args]


def collect_runs(args: argparse.Namespace, out: Path, arms: list[Arm], target: float,
                 extra: Sequence[str] = (),
                 quick_batch: bool = True) -> tuple[list[RunRecord], list[Failure]]:
    """The study's runs: read with --from, else trained (each arm, each seed)
    with :func:`trainer_base`'s flags plus ``extra``. Without one finished
    run there is nothing to analyse: a one-line error."""
    if args.sources is not None:
        records, failures = read_runs(args.sources), []
    else:
        base = trainer_base(args, target, extra, quick_batch)
        outcome = train_arms(base, arms, seeds(args), out, resume=args.resume is not None,
                             overwrite=args.overwrite)
        records, failures = outcome.records, outcome.failures
    if not records:
        raise ConfigError(f"no run finished ({len(failures)} failed; their logs are in {out / RUNS_FOLDER})")
    return records, failures


def failures_json(failures: list[Failure]) -> list[dict]:
    return [dataclasses.asdict(f) for f in failures]


def failure_lines(failures: list[Failure]) -> list[str]:
    return [f"failed: {f.arm} seed {f.seed}: {f.error} (log {f.log})" for f in failures]
