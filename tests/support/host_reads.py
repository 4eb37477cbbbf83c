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
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

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


# ATen ops that hand a device value to the host or size a result by the data
# (each a synchronisation on a GPU, and refused inside a CUDA graph's capture).
HOST_OPS = ("_local_scalar_dense", "nonzero", "nonzero_static", "is_nonzero", "equal", "masked_select",
            "_unique", "_unique2", "unique_dim", "unique_consecutive", "unique_dim_consecutive",
            "lift_fresh", "lift_fresh_copy")


class HostOp(AssertionError):
    """An ATen op that needs the host (a value read back, a data-sized result,
    a tensor made from host values, a copy across devices) ran in the trapped code."""


class _HostOpTrap(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name.split("::")[-1]
        if name in HOST_OPS:
            raise HostOp(f"aten.{name} inside the step: it needs the host")
        if name in ("index", "index_put", "index_put_", "_index_put_impl_") and any(
                t.dtype == torch.bool for t in tensors_in(args[1:2])):
            raise HostOp(f"aten.{name} with a boolean mask inside the step: a data-sized result")
        if name in ("_to_copy", "copy_"):
            devices = {t.device for t in tensors_in((args, kwargs))}
            target = kwargs.get("device")
            if len(devices) > 1 or (target is not None and torch.device(target) not in devices):
                raise HostOp(f"aten.{name} across devices inside the step: a host copy")
        return func(*args, **kwargs)


@contextmanager
def no_host_ops() -> Iterator[None]:
    """The dispatcher's view of :func:`no_host_reads` and :func:`no_host_tensors`:
    every ATen op in :data:`HOST_OPS` and every copy between devices raises,
    whatever Python path reached it (the backward's and a compiled graph's
    ops included), where the Tensor-method traps see only Python's calls."""
    with _HostOpTrap():
        yield


def tensors_in(tree) -> list[torch.Tensor]:
    """The tensors in a nest of lists, tuples and dicts (an ATen op's arguments or results)."""
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]
