"""Run folders for the analyses' tests, written instead of trained: a run.json
with the keys dawnbench_fast.analyze reads (docs/RUN_JSON.md), per-epoch rows
chosen by the test, and a fake trainer launch that writes such a folder from
the flags a study passes, so a study's whole path runs in a second."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

TRAIN_S = 10.0  # the fake runs' training phase, seconds


def write_run(folder: Path, seed: int, rows: list[tuple[int, float, float]], *, target: float = 0.94,
              batch_size: int = 500, subset: int = 2000, epochs: float = 2, train_s: float = TRAIN_S,
              lr_filters: float = 0.24, hardware: str = "test CPU, 2 threads", old_schema: bool = False,
              train_cost_usd: float | None = None, argv: list[str] = ()) -> Path:
    """A finished run's run.json in ``folder``; ``rows`` are (epoch, clock
    seconds, top-1). ``old_schema``: rows with only DAWNBench's hours column.
    ``argv``: the trainer flags its run.json's command records."""
    epochs_rows = []
    for epoch, clock, top1 in rows:
        row = {"epoch": epoch, "eval_seconds": 0.5, "top1": top1, "top5": None, "tta": False,
               "hours": clock / 3600}
        if not old_schema:
            row["clock_seconds"] = clock
        epochs_rows.append(row)
    reached = [c for _, c, t in rows if t >= target]
    run = {
        "schema_version": 2, "hardware": hardware, "command": ["python", "-m", "dawnbench_fast.cifar", *argv],
        "config": {"target": target, "batch_size": batch_size, "subset": subset, "epochs": epochs,
                   "lr_filters": lr_filters, "seed": seed},
        "result": {"seed": seed, "final_top1": rows[-1][2], "reached_target": bool(reached),
                   "tta_seconds": reached[0] if reached else None, "train_cost_usd": train_cost_usd,
                   "phases_seconds": {"init": 0.5, "train": train_s, "eval": 1.0}, "epochs": epochs_rows},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps(run))
    return folder


def flag(argv: list[str], name: str, default: str | None = None) -> str | None:
    """The last value of ``name`` in a trainer argv (argparse keeps the last)."""
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == name]
    return values[-1] if values else default


def sets(argv: list[str]) -> dict[str, str]:
    """The --set name=value pairs of an argv, the last of each name winning."""
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv[:-1]) if a == "--set")


def fake_launch(rows_for: Callable[[list[str]], list[tuple[int, float, float]]], calls: list) -> Callable:
    """A stand-in for training_runs.launch_trainer: records each argv in
    ``calls`` and writes the run folder its --out names, with ``rows_for(argv)``."""

    def launch(argv: list[str], log: Path) -> tuple[int, float, str]:
        calls.append(argv)
        s = sets(argv)
        write_run(Path(flag(argv, "--out")), int(flag(argv, "--seed")), rows_for(argv),
                  target=float(flag(argv, "--target")), batch_size=int(flag(argv, "--batch-size", "2000")),
                  subset=int(flag(argv, "--subset", "0")), epochs=float(flag(argv, "--epochs", "8")),
                  lr_filters=float(s.get("lr_filters", "0.24")), argv=argv)
        return 0, 1.5, "reports written"

    return launch
