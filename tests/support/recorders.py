"""Stand-ins for the CUDA graph recorder (cifar/static_step.py's
CudaRecorder), so that the capture protocol runs on the CPU."""

from __future__ import annotations

import torch


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
