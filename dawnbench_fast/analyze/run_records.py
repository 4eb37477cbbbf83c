"""Finished runs read back from their run.json (docs/RUN_JSON.md): the
per-epoch rows of the charged evaluations and what the analyses derive from
them (time and epoch to any accuracy, training throughput).

Times come from the rows' clock (``clock_seconds``; in run.json files
written before schema version 2, DAWNBench's ``hours`` x 3600), never from
``result.tta_seconds`` alone, so that an analysis can ask for any threshold,
not only the target the run was trained for. For the run's own target the two
agree: both are the first charged evaluation at or above it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.training.task import steps_in

RUN_JSON = "run.json"
CIFAR10_TRAIN_IMAGES = 50_000  # config.subset 0 means all of them
_SEED_SUFFIX = re.compile(r"-s(\d+)$")


@dataclass
class Row:
    """One charged evaluation: the epoch it ended, the clock then, its top-1."""

    epoch: int
    seconds: float
    top1: float


@dataclass
class RunRecord:
    """One finished training run, as the analyses need it."""

    path: Path  # its run.json
    seed: int
    config: dict
    final_top1: float
    rows: list[Row]
    phases: dict[str, float]
    hardware: str
    train_cost_usd: float | None
    wall_seconds: float | None = None  # the trainer process's wall time, when an analysis ran it
    cpu: dict | None = None  # run.json's cpu_info (family, model, model_name), where it has one
    git: dict | None = None  # run.json's git: {"sha", "dirty"}, the code the run ran
    command: list[str] | None = None  # run.json's command line (argv)
    device: str | None = None  # "cpu" or "cuda"
    threads: int | None = None  # CPU threads the run used

    @property
    def folder(self) -> str:
        return self.path.parent.name

    @property
    def arm(self) -> str:
        """The study arm an analysis's run folder ``<arm>-s<seed>`` belongs to
        (the folder name itself for folders named otherwise)."""
        return _SEED_SUFFIX.sub("", self.folder)

    @property
    def target(self) -> float:
        return float(self.config["target"])

    def first_row(self, threshold: float) -> Row | None:
        """The first charged evaluation at or above ``threshold``, else None."""
        return next((r for r in self.rows if r.top1 >= threshold), None)

    def time_to(self, threshold: float) -> float | None:
        """Clock seconds to ``threshold`` (None: never reached)."""
        row = self.first_row(threshold)
        return None if row is None else row.seconds

    def epoch_to(self, threshold: float) -> int | None:
        row = self.first_row(threshold)
        return None if row is None else row.epoch

    @property
    def end_clock(self) -> float:
        """The clock at the final evaluation, reached or not."""
        return self.rows[-1].seconds

    @property
    def best_top1(self) -> float:
        return max(r.top1 for r in self.rows)

    def images_trained(self) -> int:
        """Training images stepped through, as the trainer counts steps: whole
        batches only (the remainder of an epoch is dropped), a fractional last
        epoch rounded up to whole steps (dawnbench_fast.training.task.steps_in)."""
        n = int(self.config.get("subset") or 0) or CIFAR10_TRAIN_IMAGES
        batch = min(int(self.config["batch_size"]), n)
        return steps_in(float(self.config["epochs"]), max(1, n // batch)) * batch

    def throughput(self) -> float | None:
        """Training images per second over the training phase (steps only:
        no init, no evaluation), None where the run did not time it."""
        train = self.phases.get("train")
        return self.images_trained() / train if train else None

    def evaluated_every_epoch(self) -> bool:
        """Whether every epoch has its charged evaluation (``--eval-every 1``):
        only then is the time to an accuracy resolved to the epoch."""
        return [r.epoch for r in self.rows] == list(range(1, len(self.rows) + 1))


def find_run_files(sources: list[str], flag: str = "--from") -> list[Path]:
    """run.json paths named by ``sources``: a run.json itself, a run folder
    holding one, or any folder above run folders (a ``--runs N`` folder, an
    analysis's ``runs/``): every run.json under it, in name order."""
    found: list[Path] = []
    for source in sources:
        p = Path(source)
        if not p.exists():
            raise ConfigError(f"{flag} {source}: no such file or folder; pass a run folder (the --out of "
                              "python -m dawnbench_fast.cifar) or its run.json")
        if p.is_file():
            found.append(p)
        elif (p / RUN_JSON).is_file():
            found.append(p / RUN_JSON)
        else:
            under = sorted(p.rglob(RUN_JSON))
            if not under:
                raise ConfigError(f"{flag} {source}: no run.json in this folder or below it (a run "
                                  "still training, or not a run folder?)")
            found += under
    return found


def read_run(path: Path, flag: str = "--from") -> RunRecord:
    """One run.json as a :class:`RunRecord`, or a one-line ConfigError naming
    the file and what is wrong with it."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{flag} {path}: cannot be read ({type(e).__name__})") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{flag} {path}: not JSON (line {e.lineno}: {e.msg})") from None
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, dict) or not isinstance(data.get("config"), dict):
        raise ConfigError(f"{flag} {path}: not a run.json (no result or config); pass what "
                          "python -m dawnbench_fast.cifar wrote")
    epochs = result.get("epochs")
    if not epochs:
        raise ConfigError(f"{flag} {path}: run.json has no per-epoch rows (result.epochs is empty): "
                          "nothing to read a time from")
    try:
        rows = [Row(int(e["epoch"]), _clock(e), float(e["top1"])) for e in epochs]
        return RunRecord(path=path, seed=int(result["seed"]), config=data["config"],
                         final_top1=float(result["final_top1"]), rows=rows,
                         phases=dict(result.get("phases_seconds") or {}),
                         hardware=str(data.get("hardware", "unknown")),
                         train_cost_usd=result.get("train_cost_usd"), cpu=data.get("cpu_info"),
                         git=data.get("git"), command=data.get("command"), device=data.get("device"),
                         threads=data.get("threads"))
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{flag} {path}: run.json lacks or garbles a key ({e}); docs/RUN_JSON.md "
                          "lists them") from None


def _clock(row: dict) -> float:
    # schema 2 has the clock itself; older files only DAWNBench's hours column
    if row.get("clock_seconds") is not None:
        return float(row["clock_seconds"])
    return float(row["hours"]) * 3600.0


def read_runs(sources: list[str], flag: str = "--from") -> list[RunRecord]:
    """Every run named by ``sources`` (:func:`find_run_files`), read."""
    return [read_run(p, flag) for p in find_run_files(sources, flag)]
