"""The per-epoch log of a run: one JSON object per line in ``epochs.jsonl``
beside run.json (and, with ``--tensorboard``, the same figures as TensorBoard
scalars: dawnbench_fast.reporting.tensorboard_log), written as each epoch ends.

Unlike the result files, which are written whole and atomically when the run
ends, this log grows: each line is appended and flushed at its epoch's end,
so a run killed at any moment keeps every finished epoch's line (a line cut
by the kill is skipped when the log is read). With ``--resume`` the log is
cut back to the checkpoint's epochs before it grows again, so a repeated
epoch is not logged twice.

Keys of a line (docs/RUN_JSON.md, "epochs.jsonl"): ``seed``, ``epoch``
(1-based), ``train_loss`` (mean per example over the epoch), ``lr`` (each
parameter group's learning rate at the epoch's last step), ``top1`` /
``top5`` / ``tta`` of the charged evaluation at this epoch's end (null when
none ran), ``clock_seconds`` (the time-to-accuracy clock so far) and
``wall_seconds`` (since the run first started, interruptions included).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Protocol

from dawnbench_fast import atomic
from dawnbench_fast.reporting.tensorboard_log import TENSORBOARD_DIR, TensorBoardLog
from dawnbench_fast.training import readback
from dawnbench_fast.training.readback import NUMBER, Damaged
from dawnbench_fast.training.train import LoopResult

LOG_NAME = "epochs.jsonl"


def learning_rates(task: Any) -> dict[str, float]:
    """The task's learning rates by parameter group: its own names where it
    has ``learning_rates()``, else ``<optimizer><i>.<group>`` of its ``optimizers``."""
    named = getattr(task, "learning_rates", None)
    if callable(named):
        return named()
    return {f"{type(opt).__name__.lower()}{i}.{j}": group["lr"]
            for i, opt in enumerate(getattr(task, "optimizers", ()))
            for j, group in enumerate(opt.param_groups)}


def epoch_record(seed: int, result: LoopResult, lrs: dict[str, float], clock: float,
                 wall: float) -> dict:
    """The line of the epoch ``result`` has just finished."""
    epoch = result.epochs_done
    row = result.rows[-1] if result.rows and result.rows[-1].epoch == epoch else None
    loss = result.train_losses[epoch - 1] if len(result.train_losses) >= epoch else None
    return {"seed": seed, "epoch": epoch,
            # json writes nan as NaN, which strict readers refuse: a diverged loss is null
            "train_loss": loss if loss is not None and math.isfinite(loss) else None,
            "lr": {k: float(v) for k, v in lrs.items()},
            "top1": None if row is None else row.top1, "top5": None if row is None else row.top5,
            "tta": None if row is None else row.tta,
            "clock_seconds": clock, "wall_seconds": wall}


def read_log(path: Path) -> list[dict]:
    """The lines of a log; a line cut short by a kill (no closing newline or
    not JSON) is skipped. An absent log has no lines."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines(keepends=True):
        if not line.endswith("\n"):
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


# The keys of a line and their types (epoch_record): what the report and a resumed run read.
LINE_KEYS: dict[str, tuple[type | None, ...]] = {
    "seed": (int,), "epoch": (int,), "train_loss": (*NUMBER, None), "lr": (dict,), "top1": (*NUMBER, None),
    "top5": (*NUMBER, None), "tta": (bool, None), "clock_seconds": NUMBER, "wall_seconds": NUMBER}


def check_log(path: Path, epochs_done: int | None = None) -> None:
    """``--resume``: the log at ``path`` as a resumed run reads it back, or
    :class:`~dawnbench_fast.readback.Damaged` (one line naming it). Every
    whole line must be an epoch's record (:data:`LINE_KEYS`). ``epochs_done``:
    the checkpoint's epochs, for an interrupted run, whose log must hold a
    line for each of them (they are written before the checkpoint) and whose
    last line a kill may have cut (it is dropped); None for a finished run,
    whose every line is whole. An absent log (a run from before the log
    existed) has nothing to check."""
    if not path.exists():
        return
    text = readback.read_text(path)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        if epochs_done is None:
            raise Damaged(path, f"line {len(lines)} is cut short")
        lines.pop()  # cut by a kill: read_log skips it, the resumed run drops it
    epochs = set()
    for n, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise Damaged(path, f"line {n} is not JSON") from None
        readback.expect(path, record, LINE_KEYS, where=f"line {n}")
        readback.expect_numbers(path, record["lr"], f"line {n}: lr")
        epochs.add(record["epoch"])
    missing = sorted(set(range(1, (epochs_done or 0) + 1)) - epochs)
    if missing:
        raise Damaged(path, f"no line for epoch {missing[0]} of the {epochs_done} its checkpoint holds")


class Sink(Protocol):
    def append(self, record: dict) -> None: ...

    def close(self) -> None: ...


class EpochLog:
    """``epochs.jsonl``: appended and flushed line by line. A new run starts
    it afresh at its first line (an --overwrite'd folder's old log goes then,
    and a run that fails before its first epoch creates nothing);
    ``resume_epochs`` keeps the lines of the epochs a checkpoint holds."""

    def __init__(self, path: Path, resume_epochs: int | None = None):
        self.path = path
        self.mode = "w"
        if resume_epochs is not None:
            kept = [r for r in read_log(path) if r.get("epoch", 0) <= resume_epochs]
            atomic.write_text(path, "".join(json.dumps(r) + "\n" for r in kept))
            self.mode = "a"

    def append(self, record: dict) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open(self.mode) as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
        except OSError as e:  # a full disk: one line (a cut line is skipped when read back)
            raise atomic.WriteFailed(self.path, e) from e
        self.mode = "a"

    def close(self) -> None:
        pass


def sinks(run_dir: Path, resume_epochs: int | None, tensorboard: bool = False) -> list[Sink]:
    """Where a run's epoch records go: the JSON-lines log, and TensorBoard if asked."""
    out: list[Sink] = [EpochLog(run_dir / LOG_NAME, resume_epochs)]
    if tensorboard:
        out.append(TensorBoardLog(run_dir / TENSORBOARD_DIR, resume_epochs))
    return out
