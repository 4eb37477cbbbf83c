"""Saved weights (``--save-model``): the state dict plus the config that
rebuilds the model, so a file alone is enough to evaluate it later. Written
atomically; a missing or foreign file is a one-line error, not a traceback.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from dawnbench_fast.atomic import write_stream
from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.data.cifar10 import DataError
from dawnbench_fast.training import readback
from dawnbench_fast.training.readback import NUMBER, Damaged
from dawnbench_fast.training.train import LoopResult

M = TypeVar("M", bound=torch.nn.Module)


def save(model: torch.nn.Module, cfg: Any, path: str | os.PathLike) -> None:
    """Weights plus ``cfg`` (a dataclass), written atomically."""
    payload = {"config": dataclasses.asdict(cfg), "state_dict": model.state_dict()}
    write_stream(Path(path), lambda f: torch.save(payload, f))


def load(path: str | os.PathLike, device: str | torch.device, config_type: type,
         build: Callable[[Any], M], what: str) -> M:
    """Rebuild a model saved by :func:`save`: ``build(config)`` makes the empty
    net (fields the config type no longer has are dropped), the weights are
    loaded, and it is returned on ``device`` in eval mode. Errors name the file
    and ``what`` it should have been (DataError: one line in the CLI)."""
    return load_with_config(path, device, config_type, build, what)[0]


def load_with_config(path: str | os.PathLike, device: str | torch.device, config_type: type,
                     build: Callable[[Any], M], what: str) -> tuple[M, Any]:
    """:func:`load`'s model and the config it was saved with (fields the
    config type no longer has dropped, fields it gained at their defaults)."""
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
        fields = {f.name for f in dataclasses.fields(config_type)}
        cfg = config_type(**{k: v for k, v in payload["config"].items() if k in fields})
        model = build(cfg)
        model.load_state_dict(payload["state_dict"])
    except FileNotFoundError:
        raise DataError(f"{path}: no such model file; pass a file written by --save-model") from None
    except Exception as e:
        raise DataError(f"{path}: not a dawnbench_fast {what} ({type(e).__name__})") from e
    return model.to(device).eval(), cfg


# ---------------------------------------------------------------------------
# Run checkpoints (--resume)
# ---------------------------------------------------------------------------

RUN_CHECKPOINT = "checkpoint.pt"  # in the run's folder, beside run.json
_FORMAT = "dawnbench_fast run checkpoint v1"
# Config fields that may differ between the killed and the resuming command:
# where the same data is read from, and whether the loader is timed before
# training (ImageNet's pre-flight), change nothing that is computed.
_MAY_DIFFER = ("data_dir", "download", "preflight_seconds")


def save_run(path: Path, *, config: dict, task_state: dict, loop: dict, phases: dict[str, float],
             wall_start: float, resumes: int) -> None:
    """One run's state at an epoch's end, written atomically: a run killed at
    any moment leaves the previous checkpoint or this one, never half of one;
    a full disk is an :class:`~dawnbench_fast.atomic.WriteFailed` that leaves
    the previous one too."""
    payload = {"format": _FORMAT, "config": config, "task": task_state, "loop": loop,
               "phases": dict(phases), "wall_start": wall_start, "resumes": resumes}
    write_stream(path, lambda f: torch.save(payload, f))


# What a resumed run reads from a checkpoint besides the task's own state
# (which the task's load_state_dict reads, under readback.reading).
_KEYS: dict[str, tuple[type | None, ...]] = {
    "config": (dict,), "task": (dict,), "loop": (dict,), "phases": (dict,), "wall_start": NUMBER,
    "resumes": (int,)}
_LOOP_KEYS: dict[str, tuple[type | None, ...]] = {
    "rows": (list,), "tta_seconds": (*NUMBER, None), "tta_epoch": (int, None), "epochs_done": (int,)}


def load_run(path: Path, config: dict) -> dict:
    """The checkpoint at ``path``, checked to be whole (every key a resumed
    run reads, of its type: :class:`~dawnbench_fast.readback.Damaged`
    otherwise) and to belong to a run of ``config``; a one-line ConfigError
    naming the file and the fix otherwise."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated, empty, not a torch file, unreadable
        raise Damaged(path, f"torch cannot load it: {type(e).__name__}") from None
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise ConfigError(f"--resume: {path} is not a dawnbench_fast run checkpoint; "
                          "start the run again in a new --out")
    readback.expect(path, payload, _KEYS)
    readback.expect(path, payload["loop"], _LOOP_KEYS, where="loop")
    readback.expect_numbers(path, payload["phases"], "phases")
    with readback.reading(path):
        LoopResult.from_dict(payload["loop"])  # its rows, as the resumed loop reads them
    saved = payload["config"]
    diff = sorted(k for k in set(saved) | set(config)
                  if k not in _MAY_DIFFER and saved.get(k) != config.get(k))
    if diff:
        shown = ", ".join(f"{k}={saved.get(k)!r} there, {config.get(k)!r} now" for k in diff[:3])
        raise ConfigError(f"--resume: {path} is a checkpoint of another config ({shown}); "
                          "resume with the command that started it, or start a new --out")
    return payload
