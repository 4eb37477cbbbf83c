"""A trap for host reads of tensor values: every Tensor method that hands a
tensor's value to Python (and NumPy's conversion of a tensor) raises while
the context is open. On a GPU each would be a synchronisation that stops the
host from queueing ahead, and a graph break in a compiled or captured step;
on the CPU the same code path runs, so the CPU tests catch them.

:func:`no_host_tensors` traps the other direction: a tensor made from host
values (``torch.tensor``, ``as_tensor`` and ``asarray`` of anything but a
tensor, ``from_numpy``), which on a GPU is a copy from the host per call,
refused inside a CUDA graph's capture. Both take ``allow``: module-name prefixes whose own calls pass (the
Triton interpreter reads and writes its tensors on the host by design: a
Triton face's launcher is checked, not the interpreter standing in for the GPU).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch

TRAPPED = ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "__array__")
FACTORIES = ("tensor", "as_tensor", "asarray", "from_numpy")


class HostRead(AssertionError):
    """A tensor's value was read on the host inside the trapped code."""


class HostTensor(AssertionError):
    """A tensor was made from host values inside the trapped code."""


def _allowed(allow: tuple[str, ...]) -> bool:
    """Whether the trapped call's caller (two frames up: past the trap) is in an allowed module."""
    caller = sys._getframe(2).f_globals.get("__name__", "")
    return bool(allow) and caller.startswith(allow)


@contextmanager
def no_host_reads(allow: tuple[str, ...] = ()) -> Iterator[None]:
    saved = {name: getattr(torch.Tensor, name) for name in TRAPPED}

    def trap(name: str):
        def read(self, *args, **kwargs):
            if _allowed(allow):
                return saved[name](self, *args, **kwargs)
            raise HostRead(f"Tensor.{name}() inside the step: a host read of a tensor's value")
        return read

    for name in TRAPPED:
        setattr(torch.Tensor, name, trap(name))
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


@contextmanager
def no_host_tensors(allow: tuple[str, ...] = ()) -> Iterator[None]:
    saved = {name: getattr(torch, name) for name in FACTORIES}

    def trap(name: str):
        def make(*args, **kwargs):
            # a tensor handed to as_tensor/asarray is returned as it is (or moved between devices)
            if _allowed(allow) or (name != "from_numpy" and args and isinstance(args[0], torch.Tensor)):
                return saved[name](*args, **kwargs)
            raise HostTensor(f"torch.{name}() inside the step: a tensor made from host values")
        return make

    for name in FACTORIES:
        setattr(torch, name, trap(name))
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch, name, fn)
