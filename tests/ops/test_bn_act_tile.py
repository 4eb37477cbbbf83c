"""bn_act.cu's tiled channels_last kernels, without a GPU: the CPU harness
(tests/ops/bn_act_tile_harness.cpp, compiled here with g++) runs
bn_act_tile.cuh's per-thread steps for every thread of every block, phase by
phase between the kernel's barriers; the results are compared with float64
references on fresh random inputs, outputs poisoned first, on shapes whose
rows do not fill a block's sweep and partitions that get no rows. Also: the
Python rule that picks the tiled kernels (engine.tile_lanes) is the header's."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from dawnbench_fast.csrc import engine
from dawnbench_fast.vocabulary import activation

ROOT = Path(__file__).resolve().parents[2]
CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
TOL = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}
GELU = activation("gelu").code


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    lib = tmp_path_factory.mktemp("tile") / "harness.so"
    src = Path(__file__).with_name("bn_act_tile_harness.cpp")
    r = subprocess.run([cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-Wall",
                        "-Werror", "-I", str(ROOT / "csrc"), str(src), "-o", str(lib)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    h = ctypes.CDLL(str(lib))
    i, p, ll = ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong
    h.harness_partial.argtypes = [i, i, p, p, p, i, ll, i, i, p, p]
    h.harness_elementwise.argtypes = [i, i, p, p, p, p, p, ll, i, i]
    return h


def _p(t: torch.Tensor) -> int:
    return t.data_ptr()


def _stats(c: int) -> torch.Tensor:
    """[mean | invstd | scale | bias], as bn_stats_finalize writes them."""
    return torch.cat([torch.randn(c) * 0.3, torch.rand(c) + 0.5, torch.randn(c), torch.randn(c) * 0.2])


def _gelu_grad(z: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(z / 2 ** 0.5)) + z * torch.exp(-0.5 * z * z) / (2 * torch.pi) ** 0.5


SHAPES = [(3, 64, 5, 7), (2, 256, 3, 3), (5, 8, 1, 3), (1, 1024, 2, 1)]  # lanes up to 256 (fp32)
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


@pytest.mark.build
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("parts", [1, 7, 200])  # 200 > rows of most shapes: empty partitions
def test_partial_sums_of_the_forward_and_backward(harness, dtype, shape, parts):
    n, c, h, w = shape
    m = n * h * w
    x = (torch.randn(m, c) * 2 + 1).to(dtype)
    dy = torch.randn(m, c).to(dtype)
    stats = _stats(c)
    lanes = harness.harness_tile_lanes(CODES[dtype], c)
    assert lanes == engine.tile_lanes(c, dtype, 1, x, dy) > 0
    xd, dyd, st = x.double(), dy.double(), stats.double()
    mean, invstd, scale, bias = st.view(4, c)
    g = dyd * _gelu_grad((xd - mean) * scale + bias)
    bounds = [min(p * -(-m // parts), m) for p in range(parts + 1)]
    for mode, (a, b) in enumerate([(xd - xd[0], (xd - xd[0]) ** 2), (g, g * (xd - mean) * invstd)]):
        out = torch.full((parts, c, 2), float("nan"))
        shift = torch.full((c,), float("nan"))
        got = harness.harness_partial(CODES[dtype], mode, _p(x), _p(dy), _p(stats), GELU, m, c, parts,
                                      _p(out), _p(shift))
        assert got == lanes
        want = torch.stack([torch.stack([a[lo:hi].sum(0), b[lo:hi].sum(0)], -1)
                            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)])
        torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-3)
        if mode == 0:
            assert torch.equal(shift, x[0].float())  # the shift k: block 0 wrote the first sample


@pytest.mark.build
def test_a_shape_the_tiles_do_not_fit_runs_the_scalar_kernels(harness):
    x = torch.randn(4, 24).bfloat16()  # 24 / 8 = 3 lanes: not a power of two
    assert harness.harness_tile_lanes(1, 24) == 0 == engine.tile_lanes(24, torch.bfloat16, 1, x)
    assert harness.harness_partial(1, 0, _p(x), _p(x), 0, GELU, 4, 24, 1, 0, 0) == 0
    assert engine.tile_lanes(64, torch.bfloat16, 0, x) == 0  # NCHW
    assert engine.tile_lanes(64, torch.bfloat16, 1, torch.randn(65).bfloat16()[1:]) == 0  # misaligned
    for c in range(1, 4200, 7):  # the Python rule is the header's for every dtype
        for dt, code in CODES.items():
            assert engine.tile_lanes(c, dt, 1, x) == harness.harness_tile_lanes(code, c), (c, dt)


@pytest.mark.build
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_and_dx_vectors(harness, dtype, shape):
    n, c, h, w = shape
    m = n * h * w
    x, dy = torch.randn(m, c).to(dtype), torch.randn(m, c).to(dtype)
    stats, coef = _stats(c), torch.randn(2 * c)
    mean, invstd, scale, bias = stats.double().view(4, c)
    z = (x.double() - mean) * scale + bias
    y = torch.full_like(x, float("nan"))
    harness.harness_elementwise(CODES[dtype], 0, _p(x), 0, _p(y), _p(stats), 0, m * c, c, GELU)
    torch.testing.assert_close(y.double(), torch.nn.functional.gelu(z), rtol=TOL[dtype], atol=TOL[dtype])
    dx = torch.full_like(x, float("nan"))
    harness.harness_elementwise(CODES[dtype], 1, _p(x), _p(dy), _p(dx), _p(stats), _p(coef), m * c, c, GELU)
    cx, c1 = coef.double().view(2, c)
    want = scale * dy.double() * _gelu_grad(z) + (x.double() - mean) * cx + c1
    torch.testing.assert_close(dx.double(), want, rtol=TOL[dtype], atol=TOL[dtype] * 4)


def test_tiled_partitions_fill_the_gpu_and_keep_the_finalize_short():
    assert engine.partitions(2000 * 225, 64, 1, tiled=True) == engine.TILE_PARTITIONS_MAX
    assert engine.partitions(9, 64, 1, tiled=True) == 1
    assert engine.partitions(2000 * 225, 64, 1) == engine.partitions(2000 * 225, 64, 1, tiled=False)
