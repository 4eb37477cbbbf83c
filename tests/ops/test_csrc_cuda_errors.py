"""``--kernels cuda`` on a machine without CUDA: one-line errors that say why
and what to do; and the CuPy launch path checked without a GPU against the
kernels' real parameter lists (from NVRTC's PTX)."""

from __future__ import annotations

import contextlib
import re
import sys
import types

import numpy as np
import pytest
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import augment as csrc_augment
from dawnbench_fast.csrc import bn_act as csrc_bn_act
from dawnbench_fast.csrc import cupy_path, engine, native, sources
from dawnbench_fast.data import augment as A

NO_CUDA = not torch.cuda.is_available()


@pytest.fixture(autouse=True)
def fresh_engine(monkeypatch):
    monkeypatch.setattr(engine, "_ENGINE", {})


def _one_line(msg: str) -> str:
    assert "\n" not in msg and msg.strip() == msg, repr(msg)
    return msg


@pytest.mark.skipif(not NO_CUDA, reason="CUDA is available here")
def test_kernels_cuda_without_a_gpu_is_a_one_line_error():
    for device in ("cpu", "cuda"):
        with pytest.raises(dispatch.KernelsUnavailable) as e:
            dispatch.resolve_backend("cuda", device)
        msg = _one_line(str(e.value))
        assert msg.startswith("--kernels cuda:"), msg
        assert "--kernels torch" in msg  # the fix is named
    msg = str(dispatch.unavailable_reason("cuda", torch.device("cuda")))
    assert "sees no CUDA device" in msg, msg


def test_auto_never_picks_cuda_where_it_cannot_run():
    if NO_CUDA:
        assert dispatch.resolve_backend("auto", "cuda") != "cuda"


def test_cupy_missing_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    reason = _one_line(cupy_path.unavailable_reason())
    assert "CuPy is not installed" in reason and "pip install" in reason


def _fake_cupy(device_count):
    """A stand-in CuPy: records modules and launches; no GPU involved."""
    cp = types.ModuleType("cupy")
    launches: list[tuple[str, tuple, tuple, tuple]] = []

    def get_count():
        if isinstance(device_count, Exception):
            raise device_count
        return device_count

    class RawModule:
        def __init__(self, code, options=()):
            self.code, self.options = code, options

        def get_function(self, name):
            def launch(grid, block, args, *, shared_mem=0):  # RawKernel's signature
                launches.append((name, grid, block, args))
            return launch

    cp.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=get_count),
                                    ExternalStream=lambda ptr: None)
    cp.RawModule = RawModule
    cp.from_dlpack = lambda t: ("ptr", t)
    cp.launches = launches
    return cp


def test_cupy_without_a_device_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy",
                        _fake_cupy(RuntimeError("cudaErrorNoDevice: no CUDA-capable device")))
    reason = _one_line(cupy_path.unavailable_reason())
    assert "CuPy found no usable CUDA device" in reason and "cudaErrorNoDevice" in reason


def test_cuda_engine_prefers_the_extension_then_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(1))
    monkeypatch.setattr(engine, "_extension_reason", lambda: None)
    assert engine.cuda_engine() == "extension"
    monkeypatch.setattr(engine, "_ENGINE", {})
    monkeypatch.setattr(engine, "_extension_reason", lambda: "built without CUDA")
    assert engine.cuda_engine() == "cupy"
    monkeypatch.setattr(engine, "_ENGINE", {})
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(dispatch.KernelsUnavailable) as e:
        engine.cuda_engine()
    msg = _one_line(str(e.value))
    assert "built without CUDA; and CuPy is not installed: pip install" in msg, msg


def test_built_extension_without_a_device_raises_not_crashes():
    mod = native.load()
    if not mod.has_cuda:
        pytest.skip("this _C was built without CUDA")
    if not NO_CUDA:
        pytest.skip("CUDA is available here")
    reason = _one_line(engine._extension_reason())
    assert "found no CUDA device" in reason
    with pytest.raises(RuntimeError, match="gemm_mma_cuda"):
        mod.gemm_mma_cuda(1, 0, 0, 0, 8, 8, 8, 8, 8, 8, 0)


# ------------------------------------------------------------------ CuPy path
PTX_TYPES = {".u64": 8, ".b64": 8, ".s64": 8, ".u32": 4, ".b32": 4, ".s32": 4, ".f32": 4}


@pytest.fixture(scope="module")
def kernel_params():
    """Parameter sizes of every kernel, read off NVRTC's PTX."""
    from dawnbench_fast.csrc import nvrtc

    try:
        ptx = nvrtc.compile_program(sources.nvrtc_program(), "compute_80",
                                    sources.nvrtc_options()).binary.decode(errors="replace")
    except nvrtc.NvrtcUnavailable as e:
        pytest.skip(str(e))
    params = {}
    for m in re.finditer(r"\.entry\s+(\w+)\s*\(([^)]*)\)", ptx):
        params[m.group(1)] = [PTX_TYPES[t] for t in re.findall(r"\.param\s+(\.\w+)", m.group(2))]
    assert params, "no kernels found in the PTX"
    return params


def _arg_size(a) -> int:
    if isinstance(a, tuple) and a[0] == "ptr":
        return 8
    assert isinstance(a, np.generic), f"untyped scalar {a!r} would be packed by guesswork"
    return a.dtype.itemsize


@pytest.mark.build
def test_cupy_launches_match_kernel_signatures(monkeypatch, kernel_params):
    cp = _fake_cupy(1)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(cupy_path, "_stream", contextlib.nullcontext)
    cupy_path.module.cache_clear()
    try:
        n, c, h, w = 2, 40, 3, 5
        for dt, tdt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            for cl in (0, 1):
                x = torch.randn(n, c, h, w).to(tdt)
                stats = torch.empty(4 * c)
                p = csrc_bn_act.partitions(n * h * w, c, cl)
                part = torch.empty(p * c * 2)
                cupy_path.bn_act_forward(dt, x, torch.empty_like(x), stats, torch.ones(c),
                                         torch.zeros(c), torch.zeros(c), torch.ones(c), part,
                                         torch.empty(c), p, n, c, h * w, cl, 1, 1e-5, 0.1, 2)
                cupy_path.bn_act_forward(dt, x, torch.empty_like(x), stats, torch.ones(c),
                                         torch.zeros(c), None, None, part, torch.empty(c), p, n,
                                         c, h * w, cl, 0, 1e-5, 0.1, 2)
                cupy_path.bn_act_backward(dt, x, x, torch.empty_like(x), stats, torch.empty(c),
                                          torch.empty(c), part, torch.empty(2 * c), p, n, c,
                                          h * w, cl, 1, 2)
        padded = torch.zeros((4, 36, 36, 3), dtype=torch.uint8)
        for dt in ("f32", "bf16", "f16"):
            cupy_path.augment(dt, padded, torch.zeros(2, dtype=torch.int64),
                              torch.zeros((2, 5), dtype=torch.int32), torch.ones(3),
                              torch.zeros(3), torch.empty(2, 32, 32, 3), 2, 36, 36, 3, 32, 0)
        for dt in ("f16", "bf16"):
            a = torch.zeros((70, 33), dtype=torch.float16)
            cupy_path.gemm(dt, a, a.t(), torch.empty(70, 70), 70, 70, 33, 33, 70, 70)
    finally:
        cupy_path.module.cache_clear()
    names = {name for name, *_ in cp.launches}
    assert names <= set(kernel_params), names - set(kernel_params)
    assert {"bn_stats_partial_f32", "bn_stats_finalize", "bn_act_fwd_bf16", "bn_bwd_partial_f32",
            "bn_bwd_finalize", "bn_bwd_dx_bf16", "augment_crop_flip_f16",
            "gemm_mma_bf16"} <= names
    for name, grid, block, args in cp.launches:
        sizes = [_arg_size(a) for a in args]
        assert sizes == kernel_params[name], (name, sizes, kernel_params[name])
        assert all(g >= 1 for g in grid) and 1 <= int(np.prod(block)) <= 1024, (name, grid, block)
    # NCHW partial kernels: one block per channel and partition; NHWC: 32 channels per block
    partial = [(g, b) for nm, g, b, _ in cp.launches if nm.startswith("bn_stats_partial")]
    assert ((40, csrc_bn_act.partitions(30, 40, 0)), (256,)) in partial
    assert ((2, csrc_bn_act.partitions(30, 40, 1)), (32, 8)) in partial


def test_cupy_path_tensor_conversion_keeps_16bit_bits():
    """bf16 has no CuPy dtype: tensors cross as int16 views of the same memory."""
    cp = _fake_cupy(1)
    sys.modules["cupy"] = cp
    try:
        t = torch.randn(7).to(torch.bfloat16)
        kind, view = cupy_path._arr(t)
        assert kind == "ptr" and view.dtype == torch.int16 and view.data_ptr() == t.data_ptr()
    finally:
        del sys.modules["cupy"]


def test_augment_params_pack_in_kernel_field_order():
    p = A.augment_params(3, 1, np.arange(6), cutout=4)
    rows = csrc_augment.pack_params(p, torch.device("cpu"))
    assert rows.dtype == torch.int32 and rows.shape == (6, 5)
    assert rows[:, 0].tolist() == p.ox.tolist() and rows[:, 1].tolist() == p.oy.tolist()
    assert rows[:, 2].tolist() == p.flip.int().tolist()
    assert rows[:, 3].tolist() == p.cut_x.tolist() and rows[:, 4].tolist() == p.cut_y.tolist()
