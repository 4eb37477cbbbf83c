"""Stand-ins for the CUDA graph recorder (cifar/step.py's CudaRecorder),
so that the capture protocol runs on the CPU.

:class:`ReplayingRecorder` re-runs the Python body at every replay: it
checks the protocol's plumbing, but it cannot see what a capture breaks.
:class:`AtenRecorder` replays as a CUDA graph does: the body's Python runs
once, at the capture, where every ATen op it dispatches (the backward's
and the optimisers' included) is logged with the very tensors it read and
wrote; a replay runs the log, never the Python. So what a real capture
freezes is frozen here too (a Python scalar, branch or counter read at the
capture), a tensor the task replaces by a new one is not seen (the log
holds the old one), and every input the log reads must keep its address.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dawnbench_fast.cifar import step
from support.host_reads import tensors_in


def graphs_recorded_by(monkeypatch: Any, recorder: Any, self_test: bool = True) -> None:
    """Every Stepper made while ``monkeypatch`` holds runs a GPU plan's step
    (captured, with the run's variants), its graphs recorded by ``recorder``."""
    real_init = step.Stepper.__init__

    def captured(self, state, plan, batch, _recorder=None, _self_test=True):
        real_init(self, state, step.captured_plan(plan), batch, recorder, self_test)

    monkeypatch.setattr(step.Stepper, "__init__", captured)


class ReplayingRecorder:
    """A stand-in for CudaRecorder on the CPU: recording runs nothing (as a
    capture runs no kernel); each replay runs the body and writes its loss
    into the one output tensor, as a graph writes into its static output."""

    def __init__(self):
        self.recorded = self.replays = 0

    def __call__(self, body):
        self.recorded += 1
        out = torch.full((), float("nan"))
        recorder = self

        class Graph:
            def replay(self):
                recorder.replays += 1
                out.copy_(body())

        return Graph(), out


@dataclass
class Op:
    func: Any
    args: tuple
    kwargs: dict
    outs: list[torch.Tensor]  # the tensors the op returned at the capture (its "static outputs")


def _written(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors an op writes in place (its schema's mutable arguments)."""
    out = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = kwargs.get(arg.name) if arg.kwarg_only or i >= len(args) else args[i]
        out += tensors_in(value)
    return out


class _Log(TorchDispatchMode):
    """Logs every ATen op dispatched inside it, with its arguments (the
    tensor objects themselves) and its outputs; it saves each tensor from
    outside the log before the log first writes it, so that the capture
    can be undone (a CUDA capture runs no kernel)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Op] = []
        self.made: set[int] = set()  # ids of tensors the log's ops returned
        self.saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id -> (tensor, its value before)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in _written(func, args, kwargs):
            if id(t) not in self.made and id(t) not in self.saved:
                self.saved[id(t)] = (t, t.clone())
        out = func(*args, **kwargs)
        outs = tensors_in(out)
        given = {id(t) for t in tensors_in((args, kwargs))}
        # new tensors only: an op writing in place returns the tensor it was given
        self.made.update(id(t) for t in outs if id(t) not in given)
        self.ops.append(Op(func, args, kwargs, outs))
        return out


@dataclass
class AtenGraph:
    """One recorded body: its op log, replayed without Python."""

    ops: list[Op]
    inputs: list[tuple[torch.Tensor, int]] = field(default_factory=list)  # (tensor, data_ptr at capture)
    replays: int = 0

    def replay(self) -> None:
        """Run the log: each op on the tensors it read at the capture, its
        new results written into the tensors it returned then (as a graph's
        kernels write into the addresses captured). An input whose storage
        moved since the capture is an error, as a graph would read the old
        address."""
        for t, ptr in self.inputs:
            if t.data_ptr() != ptr:
                raise AssertionError(f"a tensor the captured step reads moved: {tuple(t.shape)} {t.dtype} "
                                     f"from {ptr:#x} to {t.data_ptr():#x}")
        self.replays += 1
        with torch.no_grad():
            for op in self.ops:
                got = tensors_in(op.func(*op.args, **op.kwargs))
                for static, new in zip(op.outs, got, strict=True):
                    if new is not static and new.data_ptr() != static.data_ptr() and static.numel():
                        static.copy_(new)  # an op that made a new tensor: into the captured one

    def reads(self) -> set[int]:
        """The addresses of every tensor from outside the log that it reads or writes."""
        return {ptr for _, ptr in self.inputs}


class AtenRecorder:
    """A stand-in for CudaRecorder that replays without running Python
    (the module's doc): the body runs eagerly ``warm_ups`` times, as
    CudaRecorder's warm-up does, then once under the op log, whose effects
    on the state are undone (a capture runs nothing)."""

    def __init__(self, warm_ups: int = 2) -> None:
        self.warm_ups = warm_ups
        self.graphs: list[AtenGraph] = []

    @property
    def replays(self) -> int:
        return sum(g.replays for g in self.graphs)

    def __call__(self, body: Callable[[], torch.Tensor]) -> tuple[AtenGraph, torch.Tensor]:
        for _ in range(self.warm_ups):
            body()
        log = _Log()
        with log:
            out = body()
        with torch.no_grad():
            for t, before in log.saved.values():
                t.copy_(before)
        inputs = {}
        for op in log.ops:
            for t in tensors_in((op.args, op.kwargs)):
                if id(t) not in log.made and t.numel():
                    inputs[id(t)] = (t, t.data_ptr())
        graph = AtenGraph(log.ops, list(inputs.values()))
        self.graphs.append(graph)
        return graph, out
