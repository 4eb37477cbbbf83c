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

from dawnbench_fast.bench import atomic_path
from dawnbench_fast.data.cifar10 import DataError

M = TypeVar("M", bound=torch.nn.Module)


def save(model: torch.nn.Module, cfg: Any, path: str | os.PathLike) -> None:
    """Weights plus ``cfg`` (a dataclass), written atomically."""
    payload = {"config": dataclasses.asdict(cfg), "state_dict": model.state_dict()}
    with atomic_path(Path(path)) as tmp:
        torch.save(payload, tmp)


def load(path: str | os.PathLike, device: str | torch.device, config_type: type,
         build: Callable[[Any], M], what: str) -> M:
    """Rebuild a model saved by :func:`save`: ``build(config)`` makes the empty
    net (fields the config type no longer has are dropped), the weights are
    loaded, and it is returned on ``device`` in eval mode. Errors name the file
    and ``what`` it should have been (DataError: one line in the CLI)."""
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
    return model.to(device).eval()
