"""A stand-in for ``torch.utils.tensorboard`` (the tensorboard package is no
dependency): its SummaryWriter records every call, so the tests can read what
a run logged without the package."""

from __future__ import annotations

import types
from pathlib import Path

WRITERS: list[FakeWriter] = []


class FakeWriter:
    def __init__(self, log_dir: str, purge_step: int | None = None):
        Path(log_dir).mkdir(parents=True, exist_ok=True)  # as the real one does
        self.log_dir, self.purge_step = log_dir, purge_step
        self.scalars: list[tuple[str, float, int]] = []
        self.flushes, self.closed = 0, False
        WRITERS.append(self)

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.append((tag, value, step))

    def flush(self) -> None:
        self.flushes += 1

    def close(self) -> None:
        self.closed = True


def module() -> types.ModuleType:
    """A module to put at sys.modules["torch.utils.tensorboard"]."""
    WRITERS.clear()
    m = types.ModuleType("torch.utils.tensorboard")
    m.SummaryWriter = FakeWriter  # type: ignore[attr-defined]
    return m
