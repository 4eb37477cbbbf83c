"""What every trainer's command line shares: argparse that fails in one line,
the execution and report flags, their checks, and the guard that turns a
user's mistake into ``prog: error: ...`` and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import torch

from dawnbench_fast import atomic, dispatch

# OneLineParser: every command line names it cli.OneLineParser; defined in config for roofline/ too
from dawnbench_fast.config.overrides import ConfigError, OneLineParser, finite_float  # noqa: F401
from dawnbench_fast.config.precision import PRECISIONS, with_resolved_precision
from dawnbench_fast.execution import distributed, gpu_defaults
from dawnbench_fast.execution.runtime import configure_process, resolve_device, set_deterministic
from dawnbench_fast.reporting import tensorboard_log
from dawnbench_fast.runner import claim, stopping
from dawnbench_fast.runner.outcome import MISSED_TARGET_STATUS
from dawnbench_fast.training.train import NonFiniteLoss

C = TypeVar("C")

# Errors that the user acts on: one line on stderr, exit 2 (a diverged run
# included: its message says which step and what to change).
# A result the disk refuses (atomic.WriteFailed: full, read-only) is one line too.
USER_ERRORS: tuple[type[BaseException], ...] = (ConfigError, dispatch.KernelsUnavailable, NonFiniteLoss,
                                                atomic.WriteFailed)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in --help, once: a help text that states its default itself
    ("default: the recipe's; ...") gets no second one, and a default that says
    nothing (None, False, an empty list) is left out."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text, default = action.help or "", action.default
        # identity, not ==: a default of 0 is worth stating, and 0 == False
        silent = default is None or default is False or default is argparse.SUPPRESS or default in ("", [])
        if "default" in text or silent:
            return text
        return super()._get_help_string(action)


def add_version_arg(p: argparse.ArgumentParser) -> None:
    """``--version``: the installed package's version (dawnbench_fast.__version__)."""
    from dawnbench_fast import __version__
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")


def add_training_args(p: argparse.ArgumentParser, d: Any, set_example: str) -> None:
    """--epochs, --batch-size, --seed, --runs, --target, --eval-every, --set,
    --show-config, --list-fields; defaults from the recipe's default config
    ``d``; ``set_example`` a ``--set`` of this recipe for the help."""
    g = p.add_argument_group("training")
    g.add_argument("--epochs", type=finite_float, default=None,
                   help=f"training epochs (default: the recipe's; {d.epochs} for the default recipe)")
    g.add_argument("--batch-size", type=int, default=None,
                   help=f"training batch size (default: the recipe's; {d.batch_size} for the default recipe)")
    g.add_argument("--seed", type=int, default=d.seed, help="seed of the (first) run")
    g.add_argument("--runs", type=int, default=1, metavar="N",
                   help="run seeds seed..seed+N-1 and report mean +- std")
    g.add_argument("--target", type=finite_float, default=d.target,
                   help="test accuracy target, a fraction (top-1; ImageNet: top-5)")
    g.add_argument("--eval-every", type=int, default=d.eval_every, metavar="N",
                   help="also evaluate every N epochs, on the clock: each is checked against the "
                   "target and written to the TSV (0 = the final epoch only)")
    g.add_argument("--show-every", type=int, default=d.show_every, metavar="N",
                   help="evaluate every N epochs for display only (one view; outside the clock, "
                   "never checked or written; 0 = never)")
    g.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help=f"override any recipe field (--list-fields lists them), e.g. --set {set_example}")
    g.add_argument("--show-config", action="store_true",
                   help="print the resolved config and exit (--list-fields says what each field means)")
    g.add_argument("--list-fields", action="store_true",
                   help="list every recipe field with its type, default and meaning, and exit")
    g.add_argument("--config", metavar="FILE", default=None,
                   help="start from the config in FILE: what --show-config printed, or a run's run.json "
                   "(its config), to rerun it exactly; flags given beside it override it, --set last")


def add_execution_args(p: argparse.ArgumentParser, d: Any,
                       kernels: tuple[tuple[str, ...], str] | None = None) -> None:
    """--device, --kernels, --threads, --precision, --deterministic, --no-progress; defaults
    from ``d``. ``kernels``: the ``--kernels`` choices that can work for this
    trainer and their help (default: every backend of the catalogue)."""
    g = p.add_argument_group("execution")
    g.add_argument("--device", default=d.device, help="auto, cpu, cuda or cuda:N")
    choices, why = kernels or (dispatch.KERNEL_CHOICES,
                               "which implementation of our custom ops to use (torch = reference)")
    g.add_argument("--kernels", default=d.kernels, choices=choices, help=why)
    g.add_argument("--threads", type=int, default=d.threads,
                   help="CPU threads for PyTorch and numba (0 = all cores)")
    g.add_argument("--precision", default=None, choices=PRECISIONS,
                   help=f"autocast precision (default: the recipe's; {d.precision} for the default recipe: "
                   "bf16 where the CPU computes bf16 natively (AVX-512 BF16, AMX, ARM BF16) or on CUDA, "
                   "else fp32; run.json's config.extra.precision says which and why)")
    g.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the training step's forward and loss, compiled in the warm-up "
                   "outside the clock (default: on CUDA only, as the published GPU records do)")
    g.add_argument("--deterministic", action="store_true",
                   help="bit-identical weights for a seed: deterministic algorithms only, kernel "
                   "choices frozen (README: what it costs, what stays nondeterministic)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_report_args(p: argparse.ArgumentParser, out: str) -> None:
    """Where the DAWNBench files go and what they say; latency, saving, profiling."""
    g = p.add_argument_group("report")
    g.add_argument("--out", default=None, help="folder for the TSV, JSON, run.json and checkpoint "
                   "files; must be new or empty unless --overwrite (default: a new folder "
                   f"{out}/<UTC time>-seed<seed>)")
    p.set_defaults(default_out=out)
    g.add_argument("--resume", metavar="RUN_FOLDER", default=None,
                   help="go on with the run whose --out was RUN_FOLDER, from its last checkpoint "
                   "(same command otherwise; finished seeds are read back, not re-run)")
    g.add_argument("--overwrite", action="store_true",
                   help="write into a non-empty --out (and over an existing --save-model), "
                   "replacing files of the same names; nothing else is deleted")
    g.add_argument("--cost-per-hour", type=finite_float, default=None, metavar="USD",
                   help="instance price, for training and inference cost")
    g.add_argument("--latency-images", type=int, default=10_000, metavar="N",
                   help="test images classified one at a time for the latency (0 = skip)")
    g.add_argument("--latency-one-view", action="store_true",
                   help="also measure the one-view latency and accuracy (faster, lower accuracy), "
                   "reported labelled in the inference JSON's misc")
    g.add_argument("--fail-below-target", action="store_true",
                   help=f"exit with status {MISSED_TARGET_STATUS} when a run misses --target (for "
                   "scripts and CI gates); without it a finished run exits 0 either way: it is a "
                   "measurement")
    g.add_argument("--author", default="dawnbench_fast",
                   help="DAWNBench author field and file-name prefix (a submission needs yours; "
                   "the summary says which submission fields were left unset)")
    g.add_argument("--email", default="", help="DAWNBench authorEmail field")
    g.add_argument("--code-url", default=None, metavar="URL",
                   help="DAWNBench codeURL field: where your code is (a submission needs it; "
                   "default: left empty, never a made-up URL)")
    g.add_argument("--hardware", default=None, metavar="TEXT",
                   help="DAWNBench hardware field, e.g. '1 x V100 (AWS p3.2xlarge)' (default: the "
                   "GPU or CPU model as detected; run.json always keeps the detected one)")
    g.add_argument("--hardware-tag", default=None,
                   help="hardware part of the file names (default: from --hardware, else the device)")
    g.add_argument("--tensorboard", action="store_true",
                   help="also log each epoch's loss, learning rates, accuracy and clock as TensorBoard "
                   "scalars in OUT/tensorboard (needs the tensorboard package)")
    g.add_argument("--save-model", metavar="PATH",
                   help="save the final weights (with --runs N: PATH gets _seedK)")
    g.add_argument("--profile-steps", type=int, default=0, metavar="N",
                   help="instead of training, profile N training steps and write a "
                   "roofline report into OUT/profile")
    g.add_argument("--profile-timer", choices=("auto", "inplace", "profiler"), default="auto",
                   help="how --profile-steps times the ops: inplace (a clock around each op, no "
                   "profiler; CPU only), profiler (torch.profiler), auto: inplace on the CPU, "
                   "the profiler on a GPU (default: %(default)s)")


def check_run_args(args: argparse.Namespace) -> None:
    """The shared flags' ranges (argparse checks only their types) and the
    output folder, before any data is read or anything is written."""
    for flag, value, low in (("--runs", args.runs, 1), ("--latency-images", args.latency_images, 0),
                             ("--profile-steps", args.profile_steps, 0)):
        if value < low:
            raise ConfigError(f"{flag} {value}: must be >= {low}")
    # `not x >= 0` so that nan fails too (every comparison with nan is false).
    if args.cost_per_hour is not None and not (math.isfinite(args.cost_per_hour) and args.cost_per_hour >= 0):
        raise ConfigError(f"--cost-per-hour {args.cost_per_hour}: must be a price >= 0 (USD per hour)")
    resolve_out(args)
    # --show-config writes nothing, so it may name any --out.
    if not getattr(args, "show_config", False):
        # a new default folder another run fills meanwhile is not refused: claim_out() moves on
        fresh = getattr(args, "out_is_fresh", False)
        check_out_dir(Path(args.out), args.overwrite or fresh, resuming=bool(args.resume))
        if args.save_model:
            check_save_model(Path(args.save_model), args.runs, args.overwrite)
        if args.tensorboard:
            tensorboard_log.check_available()


def resolve_out(args: argparse.Namespace) -> None:
    """``args.out``: the ``--resume`` folder when resuming (it is the run's own
    --out; naming another --out as well is an error), else --out, else a new
    folder under the default (:func:`fresh_out`)."""
    if args.resume is None:
        if args.out is None:
            args.out = str(fresh_out(Path(args.default_out), args.seed, args.runs))
            args.out_is_fresh = True  # another run may take it first: claim_out() picks the next
        return
    if args.out is not None and Path(args.out).resolve() != Path(args.resume).resolve():
        raise ConfigError(f"--resume {args.resume} with --out {args.out}: a resumed run writes into its own "
                          "folder; drop --out")
    if not Path(args.resume).is_dir():
        raise ConfigError(f"--resume {args.resume}: no such run folder; "
                          "pass the --out of the run to go on with")
    if not any(Path(args.resume).rglob("checkpoint.pt")) and not any(Path(args.resume).rglob("run.json")):
        raise ConfigError(f"--resume {args.resume}: no checkpoint there (the run stopped before its first "
                          "epoch ended?); start it again with --out")
    args.out = args.resume


def fresh_out(parent: Path, seed: int, runs: int = 1, now: datetime | None = None) -> Path:
    """A folder under ``parent`` that no run has used: ``<UTC time>-seed<seed>``
    (``-seeds<first>-<last>`` with --runs N). A fixed default folder would be
    refused by the second run of the same command (results are never replaced
    by accident), so the default is new each time; a name already taken (two
    runs in the same second) gets ``-2``, ``-3`` ... Two runs that look at
    once both see the same name free: :func:`claim_out` settles it."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    seeds = f"seed{seed}" if runs == 1 else f"seeds{seed}-{seed + runs - 1}"
    path, k = parent / f"{stamp}-{seeds}", 1
    while path.exists():
        k += 1
        path = parent / f"{stamp}-{seeds}-{k}"
    return path


def check_out_dir(path: Path, overwrite: bool, resuming: bool = False) -> None:
    """The one place that decides whether a run may write into ``--out``.

    A new or empty folder is fine; a non-empty one only with ``--overwrite``
    (results are never replaced by accident) or when ``resuming`` a run from
    that folder. A file, or a path through a file, is an error. Nothing is
    created here: the folder appears with the run's first result file.
    """
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--out {path}: is a file, not a folder; pass a folder path")
    _check_parents("--out", path, "folder")
    _check_writable("--out", path)
    if not (overwrite or resuming) and claim.holds_files(path):
        raise ConfigError(f"--out {path}: folder is not empty (results of an earlier run?); "
                          "pass a new --out folder, or --overwrite to replace its files")


def claim_out(args: argparse.Namespace) -> claim.Claim | None:
    """Take ``--out`` for this run before anything is written into it
    (:func:`claim_out_dir`); a default folder (``--out`` not given) that
    another run took moves on to the next free name. Under torchrun only
    rank 0, the one that writes, claims (None elsewhere)."""
    if int(os.environ.get("RANK", "0")) != 0:
        return None
    def next_name() -> Path:
        return fresh_out(Path(args.default_out), args.seed, args.runs)

    fresh = getattr(args, "out_is_fresh", False)
    out, held = claim_out_dir(Path(args.out), args.overwrite, bool(args.resume), next_name if fresh else None)
    args.out = str(out)
    return held


def claim_out_dir(out: Path, overwrite: bool, resuming: bool,
                  next_name: Callable[[], Path] | None = None) -> tuple[Path, claim.Claim]:
    """Claim ``out`` (runner/claim.py), then check it (:func:`check_out_dir`):
    checked before the claim, two commands started together would both find
    it empty. A folder another run holds, or one that holds files, is refused
    in one line, unless ``next_name`` gives a folder to try instead (a default
    folder, whose name the user never chose); the folder taken and its claim."""
    for _ in range(100):
        try:
            held = claim.claim(out)
        except claim.FolderInUse as e:
            if next_name is None:
                raise ConfigError(str(e)) from None
            out = next_name()
            continue
        except claim.ClaimError as e:
            raise ConfigError(str(e)) from None
        try:
            check_out_dir(out, overwrite, resuming)
        except ConfigError:
            held.release()
            if next_name is None:
                raise
            out = next_name()
            continue
        return out, held
    raise ConfigError(f"--out {out}: no free folder after 100 names; pass --out")


def check_save_model(path: Path, runs: int, overwrite: bool) -> None:
    """``--save-model PATH`` is written after the training: whatever would make
    that write fail or replace a saved model is refused now, before it."""
    if path.is_dir():
        raise ConfigError(f"--save-model {path}: is a folder; pass a file path, e.g. {path / 'model.pt'}")
    _check_parents("--save-model", path, "file")
    _check_writable("--save-model", path.parent)
    # With --runs N each seed's model is PATH's stem + _seedK (runs.run_one).
    stem, suffix = glob.escape(path.stem), glob.escape(path.suffix)  # a name may hold [ or *
    pattern = f"{stem}_seed*{suffix}" if runs > 1 else glob.escape(path.name)
    existing = sorted(path.parent.glob(pattern)) if path.parent.is_dir() else []
    if existing and not overwrite:
        raise ConfigError(f"--save-model {path}: {existing[0]} exists; pass a new path, or "
                          "--overwrite to replace it")


def _check_parents(flag: str, path: Path, kind: str) -> None:
    # Missing folders are created at the first write; a file on the way there would
    # only fail then, after the training, so look for one now.
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{flag} {path}: {parent} is a file; pass a {kind} path")
            return


def _check_writable(flag: str, path: Path) -> None:
    # Permissions prove nothing as root, and /proc or a read-only mount refuses
    # whatever the mode bits say: ask the system, with a folder made and removed
    # at once in the deepest part of the path that exists (nothing is left).
    base = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    try:
        os.rmdir(tempfile.mkdtemp(prefix=claim.PROBE_PREFIX, dir=base))
    except OSError as e:
        raise ConfigError(f"{flag} {path}: {base} refuses new files ({e.strerror or e}); "
                          "pass a folder on a writable disk") from None


def json_dumps(obj: object) -> str:
    """Indented JSON, anything unusual as its str (paths, devices): --show-config."""
    return json.dumps(obj, indent=2, default=str)


def guarded(prog: str, command: Callable[[], int],
            errors: tuple[type[BaseException], ...] = USER_ERRORS) -> int:
    """Run ``command``; a user error (``errors``) is one line and exit 2, ^C is exit 130,
    SIGTERM is treated as ^C (runner/stopping.py) and exits 143.
    A torchrun job's process group is left at the end, whatever happened."""
    finished = False
    try:
        with stopping.sigterm_as_interrupt():
            code = command()
        finished = True
        return code
    except errors as e:
        sys.stderr.write(f"{prog}: error: {e}\n")
        return 2
    except stopping.Terminated:
        sys.stderr.write(f"{prog}: terminated (SIGTERM)\n")
        return stopping.TERMINATED_STATUS
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return stopping.INTERRUPTED_STATUS
    finally:
        distributed.shutdown(finished)


def start_run(cfg: C) -> tuple[C, torch.device, distributed.World]:
    """A trainer's process set-up from its resolved config: threads and the
    allocator, ``--deterministic``, the device (under torchrun this rank's,
    with the process group joined: dawnbench_fast.execution.distributed), cuDNN
    autotuning, and the concrete precision (a note on stderr when ``auto``
    gives fp32). Returns the config with its precision made concrete."""
    current: Any = cfg
    configure_process(current.threads)
    set_deterministic(current.deterministic)
    w, device = distributed.init_from_env(resolve_device(current.device))
    gpu_defaults.configure_cuda(device, current.deterministic)
    current, choice = with_resolved_precision(current, device)
    if choice.requested == "auto" and choice.precision == "fp32" and w.main:
        print(f"note: precision fp32 ({choice.why})", file=sys.stderr)
    return current, device, w


def check_single_process(args: argparse.Namespace, w: distributed.World) -> None:
    """``--profile-steps`` profiles one process: refused under a torchrun job of several."""
    if args.profile_steps and w.distributed:
        raise ConfigError(f"--profile-steps {args.profile_steps}: profiles one process; run it without "
                          f"torchrun (this job has {w.size})")
