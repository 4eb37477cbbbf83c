"""pytest-benchmark suite: each Triton kernel against its PyTorch/cuDNN/cuBLAS
equivalent on CUDA, at the CIFAR net's shapes (batch 2000, widths 64/256/256,
bf16, channels_last).

    pytest benchmarks/bench_triton_kernels.py --benchmark-json out.json

Each benchmark stores in ``extra_info``: the op's FLOPs and minimal bytes (the
roofline formulas of each op's kernels/<op>_costs.py), the achieved TFLOP/s and
GB/s at the median time, and the fraction of the device's peak (compute roof
for the GEMM-like kernels, bandwidth roof for the memory-bound ones) from
dawnbench_fast.roofline.peaks. Both implementations of a kernel share a
``group``, so the table compares them in the same run.

Skipped without a CUDA device: Triton's CPU interpreter timings say nothing
about GPU speed.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
    reason="Triton kernel benchmarks need a CUDA device (no GPU here, or TRITON_INTERPRET=1)")

BATCH = int(os.environ.get("DAWNBENCH_BENCH_BATCH", "2000"))
DT = torch.bfloat16
# (Cin, Cout, H) of the three conv groups' first convs at 32 px input (whitening: 31 px)
GROUPS = [(24, 64, 31), (64, 256, 15), (256, 256, 7)]


@pytest.fixture(scope="module")
def peaks():
    from dawnbench_fast.roofline.peaks import detect_gpu

    return detect_gpu()


def _run(benchmark, fn, flops, nbytes, peaks, compute_bound, precision="bf16"):
    def call():
        fn()
        torch.cuda.synchronize()

    for _ in range(3):  # compile / autotune / cuDNN heuristics outside the timing
        call()
    benchmark.pedantic(call, rounds=20, iterations=1, warmup_rounds=2)
    t = benchmark.stats.stats.median
    info = benchmark.extra_info
    info.update(flops=flops, bytes=nbytes, seconds_median=t, tflops=flops / t / 1e12,
                gbps=nbytes / t / 1e9, device=torch.cuda.get_device_name())
    if peaks is not None:
        roof_p, roof = peaks.roof(precision)
        info["peak_fraction_compute"] = flops / t / roof
        info["peak_fraction_bandwidth"] = nbytes / t / peaks.bandwidth
        info["bound"] = "compute" if compute_bound else "memory"
        info["peak_fraction"] = info["peak_fraction_compute" if compute_bound
                                     else "peak_fraction_bandwidth"]
        info["peaks"] = peaks.name


def _nhwc(n, c, h, w=None):
    return torch.randn(n, h, w or h, c, device="cuda", dtype=DT)


@pytest.mark.parametrize("impl", ["triton", "torch"])
@pytest.mark.parametrize("cin,cout,h", GROUPS, ids=lambda v: str(v))
def test_conv3x3_pool_stats(benchmark, impl, cin, cout, h, peaks):
    """conv3x3 + 2x2 max-pool + per-channel sum/sum of squares (forward)."""
    from dawnbench_fast.kernels import conv_group, conv_group_costs

    benchmark.group = f"conv3x3_pool_stats {cin}->{cout} @{h}px"
    x = _nhwc(BATCH, cin, h)
    w = torch.randn(cout, cin, 3, 3, device="cuda", dtype=DT) / (9 * cin) ** 0.5
    e = torch.empty(0, device="cuda")
    wm = conv_group.wmat(w, DT)
    xc = x.permute(0, 3, 1, 2)  # channels_last view

    if impl == "triton":
        def fn():
            return conv_group.conv3x3_pool_fwd(x, wm, e, e, "gelu", True, False)
    else:
        def fn():
            y = F.max_pool2d(F.conv2d(xc, w, padding=1), 2)
            yf = y.float()
            return y, yf.sum((0, 2, 3)), (yf * yf).sum((0, 2, 3))
    flops, nbytes = conv_group_costs.conv3x3_pool_fwd_cost(
        [list(x.shape), list(wm.shape), [0], [0]], ["c10::BFloat16", "c10::BFloat16"])
    _run(benchmark, fn, flops, nbytes, peaks, compute_bound=True)


@pytest.mark.parametrize("impl", ["triton", "torch"])
@pytest.mark.parametrize("c,h", [(64, 15), (256, 7), (256, 3)], ids=lambda v: str(v))
def test_conv3x3_prologue_stats(benchmark, impl, c, h, peaks):
    """act(x*scale+shift) -> conv3x3 -> statistics (the group's second conv)."""
    from dawnbench_fast.kernels import conv_group, conv_group_costs

    benchmark.group = f"conv3x3_bnact_prologue_stats {c}->{c} @{h}px"
    x = _nhwc(BATCH, c, h)
    w = torch.randn(c, c, 3, 3, device="cuda", dtype=DT) / (9 * c) ** 0.5
    sc = torch.rand(c, device="cuda") + 0.5
    sh = torch.randn(c, device="cuda")
    wm = conv_group.wmat(w, DT)
    xc = x.permute(0, 3, 1, 2)

    if impl == "triton":
        def fn():
            return conv_group.conv3x3_fwd(x, wm, sc, sh, "gelu", True, False)
    else:
        def fn():
            a = F.gelu(xc.float() * sc[:, None, None] + sh[:, None, None]).to(DT)
            y = F.conv2d(a, w, padding=1)
            yf = y.float()
            return y, yf.sum((0, 2, 3)), (yf * yf).sum((0, 2, 3))
    flops, nbytes = conv_group_costs.conv3x3_fwd_cost(
        [list(x.shape), list(wm.shape), [c], [c]], ["c10::BFloat16", "c10::BFloat16"])
    _run(benchmark, fn, flops, nbytes, peaks, compute_bound=True)


@pytest.mark.parametrize("impl", ["triton", "torch"])
@pytest.mark.parametrize("cin,cout,h", GROUPS, ids=lambda v: str(v))
def test_conv_group_train_step(benchmark, impl, cin, cout, h, peaks):
    """A whole ConvGroup, forward + backward in training mode."""
    from dawnbench_fast.kernels import conv_group as conv_group_op
    from dawnbench_fast.models.layers import ConvGroup
    from dawnbench_fast.models.layers import conv_group as ref

    benchmark.group = f"conv_group fwd+bwd {cin}->{cout} @{h}px"
    g = ConvGroup(cin, cout).cuda().to(memory_format=torch.channels_last)
    x = _nhwc(BATCH, cin, h).permute(0, 3, 1, 2).requires_grad_(True)
    impl_fn = conv_group_op.conv_group if impl == "triton" else ref

    def fn():
        with torch.autocast("cuda", dtype=DT):
            y = impl_fn(g, x)
        y.float().sum().backward()

    p = h // 2
    macs = BATCH * (h * h * cin * cout + p * p * cout * cout) * 9
    flops = 3 * 2 * macs  # forward + data and weight gradients
    nbytes = 2 * BATCH * (h * h * cin + 2 * h * h * cout + 3 * p * p * cout) * 3  # rough
    _run(benchmark, fn, flops, nbytes, peaks, compute_bound=True)


@pytest.mark.parametrize("impl", ["triton", "torch"])
@pytest.mark.parametrize("c,h", [(64, 15), (256, 7), (256, 3)], ids=lambda v: str(v))
def test_bn_act_train(benchmark, impl, c, h, peaks):
    """BatchNorm (training) + GELU forward + backward on bf16 NHWC."""
    from dawnbench_fast.kernels import bn_act as bn_act_op
    from dawnbench_fast.models.layers import BatchNorm
    from dawnbench_fast.models.layers import bn_act as ref

    benchmark.group = f"bn_act fwd+bwd C={c} @{h}px"
    bn = BatchNorm(c).cuda()
    x = _nhwc(BATCH, c, h).permute(0, 3, 1, 2).requires_grad_(True)
    impl_fn = bn_act_op.bn_act if impl == "triton" else ref

    def fn():
        impl_fn(x, bn, "gelu").float().sum().backward()

    n = x.numel()
    # forward: read x twice (stats, apply), write y; backward: read x, dy twice, write dx
    nbytes = 2 * n * (3 + 5)
    _run(benchmark, fn, 30 * n, nbytes, peaks, compute_bound=False)


@pytest.mark.parametrize("impl", ["triton", "torch"])
@pytest.mark.parametrize("m,k,n", [(256, 2304, 256), (64, 576, 64), (BATCH, 256, 10)],
                         ids=["ns_256x2304", "ns_64x576", "head"])
def test_gemm(benchmark, impl, m, k, n, peaks):
    """X @ X.T of Newton-Schulz (conv filters flattened) and the linear head."""
    from dawnbench_fast.kernels import gemm, gemm_costs

    benchmark.group = f"gemm {m}x{k}x{n}"
    a = torch.randn(m, k, device="cuda", dtype=DT)
    b = (a.t() if m == n else torch.randn(n, k, device="cuda", dtype=DT).t())

    def fn():
        return gemm.gemm(a, b) if impl == "triton" else a @ b
    flops, nbytes = gemm_costs.gemm_cost([[m, k], [k, n]], ["c10::BFloat16"] * 2)
    _run(benchmark, fn, flops, nbytes, peaks, compute_bound=True)


@pytest.mark.parametrize("impl", ["triton", "torch"])
@pytest.mark.parametrize("rows,cols", [(64, 216), (256, 576), (256, 2304)],
                         ids=["64x24x3x3", "256x64x3x3", "256x256x3x3"])
def test_newton_schulz(benchmark, impl, rows, cols, peaks):
    """Muon's 3-iteration Newton-Schulz on one conv filter bank (bf16):
    Triton GEMMs with the element-wise terms in the epilogue vs the
    optimizer's torch implementation (cuBLAS + element-wise kernels)."""
    from dawnbench_fast import dispatch
    from dawnbench_fast.optim.muon import newton_schulz as reference

    benchmark.group = f"newton_schulz {rows}x{cols}"
    g = torch.randn(rows, cols, device="cuda")
    ns = dispatch.get_op("newton_schulz", "triton") if impl == "triton" else reference
    m, k = min(rows, cols), max(rows, cols)
    flops = 3 * (2 * m * m * k + 2 * m * m * m + 2 * m * m * k)
    nbytes = 3 * 2 * (3 * m * k + 3 * m * m)
    _run(benchmark, lambda: ns(g, 3), flops, nbytes, peaks, compute_bound=True)


@pytest.mark.parametrize("impl", ["triton", "torch"])
def test_augment(benchmark, impl, peaks):
    """uint8 dataset -> augmented normalised batch (bf16 for Triton; the torch
    reference produces fp32 then casts, as a trainer would)."""
    import numpy as np

    from dawnbench_fast import dispatch
    from dawnbench_fast.data.augment import augment_params, augment_torch, normalisation
    from dawnbench_fast.kernels import augment_costs

    benchmark.group = f"augment batch {BATCH}"
    padded = torch.randint(0, 256, (50000, 36, 36, 3), dtype=torch.uint8, device="cuda")
    idx = torch.from_numpy(np.random.default_rng(0).permutation(50000)[:BATCH]).cuda()
    p = augment_params(0, 1, idx)  # on the device, as the trainer makes them
    sc, sh = (torch.from_numpy(a).cuda() for a in normalisation((0.5,) * 3, (0.25,) * 3))
    aug = dispatch.get_op("augment", "triton")

    def fn():
        if impl == "triton":
            return aug(padded, idx, p, sc, sh, out_dtype=DT)
        return augment_torch(padded, idx, p, sc, sh).to(DT)
    flops, _ = augment_costs.augment_cost([list(padded.shape), [BATCH]], ["unsigned char", "long int"])
    nbytes = BATCH * 32 * 32 * 3 * (1 + 2)  # uint8 in, bf16 out
    _run(benchmark, fn, flops, nbytes, peaks, compute_bound=False)
