"""A trap for host reads of tensor values: every Tensor method that hands a
tensor's value to Python (and NumPy's conversion of a tensor) raises while
the context is open. On a GPU each would be a synchronisation that stops the
host from queueing ahead, and a graph break in a compiled or captured step;
on the CPU the same code path runs, so the CPU tests catch them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

TRAPPED = ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "__array__")


class HostRead(AssertionError):
    """A tensor's value was read on the host inside the trapped code."""


@contextmanager
def no_host_reads() -> Iterator[None]:
    saved = {name: getattr(torch.Tensor, name) for name in TRAPPED}

    def trap(name: str):
        def read(self, *args, **kwargs):
            raise HostRead(f"Tensor.{name}() inside the step: a host read of a tensor's value")
        return read

    for name in TRAPPED:
        setattr(torch.Tensor, name, trap(name))
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)
