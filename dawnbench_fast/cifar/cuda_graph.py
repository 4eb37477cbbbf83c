"""The recorder of the captured step (cifar/step.py's Stepper): a body
recorded as a CUDA graph, on one stream, into one memory pool, after warm-up
runs of it. Tests drive it with a stand-in of torch.cuda that records the
calls (tests/cifar/test_capture_replay.py) and replace it with recorders that
replay without a GPU (tests/support/recorders.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from dawnbench_fast.execution import gpu_defaults


class Replayable(Protocol):
    def replay(self) -> None: ...


Recorder = Callable[[Callable[[], torch.Tensor]], tuple[Replayable, torch.Tensor]]


class CudaRecorder:
    """Records a body as a CUDA graph into one memory pool shared by every
    graph it records: the step's variants are replayed in blocks, in the
    order they were captured, never concurrently, and nothing one graph
    allocates outlives its replay except its output (kept referenced by
    :class:`Stepper`), which is what makes one pool safe.

    The body runs :data:`WARM_UPS` times eagerly on the stream the capture
    then records on, as the 2026 CIFAR record does: every lazily made
    resource (cuBLAS's workspace per stream, the allocator's blocks, a
    compiled graph's first-call set-up) exists before the capture, which
    would otherwise make it mid-capture or fail. The capture itself runs
    under :func:`~dawnbench_fast.execution.gpu_defaults.no_recompile`: a
    recompilation there (Dynamo reading the generator's seed is refused
    inside a capture) is a clear error rather than a broken graph."""

    WARM_UPS = 2

    def __init__(self, cuda: Any = None) -> None:
        """``cuda``: the torch.cuda module (tests pass a stand-in that records the calls)."""
        self.cuda = torch.cuda if cuda is None else cuda
        self.pool = self.cuda.graph_pool_handle()
        self.stream = self.cuda.Stream()  # one stream for every warm-up and capture

    def __call__(self, body: Callable[[], torch.Tensor]) -> tuple[Replayable, torch.Tensor]:
        cuda, stream = self.cuda, self.stream
        stream.wait_stream(cuda.current_stream())  # the work queued before (the inputs' loads)
        with cuda.stream(stream):
            for _ in range(self.WARM_UPS):
                body()
        graph = cuda.CUDAGraph()
        with gpu_defaults.no_recompile(), cuda.graph(graph, pool=self.pool, stream=stream):
            out = body()
        cuda.current_stream().wait_stream(stream)
        return graph, out
