"""Backends for the per-op tests: every test that takes the ``backend`` and
``implementation`` fixtures runs once per backend of ``--kernels`` plus the
catalogue's reference itself, and is skipped, with the reason, where that
backend cannot run here (CUDA without a GPU, cpu without the C++ build) or
does not implement the op (it would only re-test the reference)."""

from __future__ import annotations

import functools
import os
import zlib
from collections.abc import Callable, Iterator

import pytest
import torch

from dawnbench_fast import dispatch

BACKENDS = ["reference", "torch", "cpu", "triton", "cuda"]


def triton_device() -> torch.device:
    """Where the Triton kernels run: the GPU when there is one and the
    interpreter is off, else the CPU in the interpreter (tests/conftest.py
    turns it on unless TRITON_INTERPRET is set otherwise)."""
    if os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


@pytest.fixture(autouse=True)
def fresh_run_json_registries(monkeypatch) -> None:
    """The sets where the cpu conv group notes which before-pool kernels ran
    (run.json's conv_wgrad_methods) start empty in every test: they are
    process-wide, and a test that reads chosen_methods must not see the
    shapes of the groups other tests ran."""
    try:
        from dawnbench_fast.csrc import conv_group, conv_group_dgrad
    except ImportError:  # an install without the csrc package: nothing to isolate
        return
    monkeypatch.setattr(conv_group, "_BEFORE_POOL_RAN", set())
    monkeypatch.setattr(conv_group_dgrad, "RAN", {})


@pytest.fixture(autouse=True)
def full_fp32_on_cuda() -> Iterator[None]:
    """fp32 in full fp32 on a GPU, for every op test: cuDNN's convolutions take
    TF32 by default, and the Triton kernels follow the same flags
    (kernels/launches.dot_precision), so a test with them on would compare
    TF32 against TF32 at fp32 tolerances, or TF32 against fp32 where one side
    runs elsewhere (the first H100 run failed the fp32 conv tests that way)."""
    if not torch.cuda.is_available():
        yield
        return
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


@pytest.fixture(autouse=True)
def triton_tensors_on_their_device(request) -> Iterator[None]:
    """The ``test_triton_*`` tests make their tensors with the factory functions'
    default device: on a GPU machine run with TRITON_INTERPRET=0 that is the GPU,
    so the same tests check the compiled kernels there."""
    if not request.node.name.startswith("test_triton") or triton_device().type == "cpu":
        yield
        return
    previous = torch.get_default_device()
    torch.set_default_device(triton_device())
    try:
        yield
    finally:
        torch.set_default_device(previous)


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def device(backend: str) -> torch.device:
    """Where the backend's tensors live: CUDA for ``cuda``, else the CPU (Triton
    runs in the interpreter here)."""
    if backend == "triton":
        return triton_device()
    return torch.device("cuda" if backend == "cuda" else "cpu")


@pytest.fixture
def implementation(backend: str, device: torch.device) -> Callable[[str], Callable]:
    """``implementation(op)``: the backend's implementation of op, or a skip."""

    def get(op: str) -> Callable:
        if backend == "reference":
            return sync_checked(dispatch.reference(op), device)
        reason = dispatch.unavailable_reason(backend, device)
        if reason is not None:
            pytest.skip(f"--kernels {backend}: {reason}")
        if dispatch.op_table(backend, [op])[op]["backend"] != backend:
            why = dispatch.CATALOGUE[op].no_face.get(backend, "the reference serves it")
            pytest.skip(f"--kernels {backend} has no {op} of its own: {why}")
        return sync_checked(dispatch.get_op(op, backend), device)

    return get


def sync_checked(fn: Callable, device: torch.device) -> Callable:
    """``fn`` itself off the GPU; on it, ``fn`` run under
    ``torch.cuda.set_sync_debug_mode("error")``: an op that makes the host
    wait for the device (a ``.item()``, a ``nonzero``, a copy to the host)
    fails its test, as it would break a captured step. Only the
    op's call is checked: the test's own comparisons read results back."""
    if device.type != "cuda":
        return fn

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            return fn(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode(previous)

    return checked


@pytest.fixture
def seed_from_test_id(request) -> None:
    """Random (never zero) inputs, reproducible per test id: the op tests that
    draw from torch's global generator take it (``pytestmark`` usefixtures)."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def small_interpreter_tiles(monkeypatch) -> None:
    """16-row Triton tiles under the interpreter: several tiles and programs
    per test, and masked edges."""
    from dawnbench_fast.kernels import launches

    monkeypatch.setattr(launches, "INTERPRETER_ROWS", 16)
