"""A training task stopped after some epochs, checkpointed and resumed in a
fresh task, for the tests that hold it to the run that never stopped (bit for
bit under ``deterministic``)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable

import torch


def train_epochs(task, epochs: Iterable[int]) -> None:
    """Train ``task`` through ``epochs``, stopping where its steps end (a last
    fractional epoch is cut there, as the training loop cuts it)."""
    for e in epochs:
        for batch in task.epoch_batches(e):
            if task.step == task.total_steps:
                break
            task.train_step(*batch)


def stopped_and_resumed(make_task: Callable[[], object], stop: int, end: int) -> tuple[object, object]:
    """A task trained for epochs 0..stop-1 and its state_dict loaded into a
    fresh ``make_task()`` that trains epochs stop..end-1: (the first, the resumed)."""
    first = make_task()
    first.init_model()
    train_epochs(first, range(stop))
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    resumed = make_task()
    resumed.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=False))
    train_epochs(resumed, range(stop, end))
    return first, resumed


def assert_same_weights(a, b) -> None:
    """Every tensor of the two tasks' models equal, bit for bit (the first that differs named)."""
    for (name, x), y in zip(a.model.state_dict().items(), b.model.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
