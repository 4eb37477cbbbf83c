"""Backends for the per-op tests: every test that takes the ``backend`` and
``implementation`` fixtures runs once per backend of ``--kernels`` plus the
catalogue's reference itself, and is skipped, with the reason, where that
backend cannot run here (CUDA without a GPU, cpu without the C++ build) or
does not implement the op (it would only re-test the reference)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from dawnbench_fast import dispatch

BACKENDS = ["reference", "torch", "cpu", "triton", "cuda"]


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def device(backend: str) -> torch.device:
    """Where the backend's tensors live: CUDA for ``cuda``, else the CPU (Triton
    runs in the interpreter here)."""
    return torch.device("cuda" if backend == "cuda" else "cpu")


@pytest.fixture
def implementation(backend: str, device: torch.device) -> Callable[[str], Callable]:
    """``implementation(op)``: the backend's implementation of op, or a skip."""

    def get(op: str) -> Callable:
        if backend == "reference":
            return dispatch.reference(op)
        reason = dispatch.unavailable_reason(backend, device)
        if reason is not None:
            pytest.skip(f"--kernels {backend}: {reason}")
        if dispatch.op_table(backend, [op])[op]["backend"] != backend:
            pytest.skip(f"--kernels {backend} has no {op} of its own (serves the reference)")
        return dispatch.get_op(op, backend)

    return get
