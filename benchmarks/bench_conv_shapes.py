"""oneDNN's bf16 convolutions at the CIFAR net's shapes, and the GEMMs a
Winograd F(2x2, 3x3) form of the largest one would run instead: where the
step's conv time goes and whether a cheaper algorithm could pay on this CPU.

    python -m pytest benchmarks/bench_conv_shapes.py --benchmark-only

For each 3x3 convolution of the net (padding 1, bf16, channels_last, the
recipe's batch ``BENCH_BATCH``, default 1536 as in ``--recipe hiverge``):
the forward, the weight gradient and the input gradient, each as one ATen
call, and ``wgrad_dpbf16``: the ``cpu`` backend's own weight gradient
(csrc/conv_group_wgrad_cpu.cpp, its default where it applies; skipped without the
C++ build or AVX-512 BF16), ``wgrad_im2col``: one GEMM of the unfolded input
(csrc/conv_group.py, the default on 3x3 maps where oneDNN has AMX), and for
the three convs whose output feeds a 2x2 max-pool (24->64 @31, 64->256 @15,
256->256 @7), ``wgrad_pooled_dpbf16`` and
``wgrad_pooled_sparse``: the dense kernel and the backend's before-pool
variant (csrc/conv_group_wgrad_pooled_cpu.cpp, the default there) on a real
max-pool gradient (one nonzero per window and channel). ``extra_info``: GFLOP
(2 x multiply-accumulates of the direct form, padding taps included, the same
count for every weight gradient, so the GFLOP/s of the sparse variant is the
dense-equivalent rate) and GFLOP/s. ``test_conv3x3_dgrad_pooled``: the input
gradient of the same three convs on the same kind of dY, oneDNN's dense one
(the cpu backend's default, ``onednn``) against csrc/conv_group_dgrad_pooled_cpu.cpp
(``pooled``, ``DAWNBENCH_DGRAD=pooled``), GFLOP counted as for the dense
gradient; the next step is to time it on an idle machine and flip the default
in csrc/conv_group_dgrad.py if it wins:

    python -m pytest benchmarks/bench_conv_shapes.py -k dgrad_pooled --benchmark-only

``test_wgrad_amx_interleaved``: where the CPU has AMX tiles, our AMX weight
gradient (csrc/conv_group_wgrad_amx_cpu.cpp, the default there on maps of at
most 7x7) with the forward and oneDNN's weight gradient in every round
(docs/journal/2026-11-26-amx-weight-gradient-kernel.md):

    python -m pytest benchmarks/bench_conv_shapes.py -k amx_interleaved --benchmark-only

Winograd F(2x2, 3x3) for 256 -> 256 channels at 7 x 7: each image becomes
4 x 4 tiles of 4 x 4 transformed pixels (16 tile positions x 16 tiles), so
the convolution becomes 16 GEMMs of (batch x 16) x 256 by 256 x 256: 0.58 of
the direct form's multiply-accumulates. ``winograd_gemm_*`` time those GEMMs
alone (``torch.bmm`` in bf16, the forward, input-gradient and
weight-gradient products) on random data, before any transform: if they are
not faster than the direct convolution, no transform can make Winograd pay.
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch
import torch.nn.functional as F
from knobs import env_int

BATCH = env_int("BENCH_BATCH", 1536)
ROUNDS = env_int("BENCH_ROUNDS", 5)
# (in channels, out channels, side): the net's 3x3 convolutions (widths 64, 256, 256 after the
# 24-channel whitening; each group's second conv runs after its 2x2 max-pool)
SHAPES = [(24, 64, 31), (64, 64, 15), (64, 256, 15), (256, 256, 7), (256, 256, 3)]
TILES_7 = 16  # 2x2-output tiles covering a 7x7 map (4 x 4 of them, the last row and column half used)


def _bf16_cl(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)


def _record(benchmark, gflop: float, fn) -> None:
    fn()  # warm-up: oneDNN builds its primitive
    benchmark.pedantic(fn, rounds=ROUNDS, iterations=1)
    benchmark.extra_info.update(batch=BATCH, gflop=round(gflop, 2),
                                gflop_per_s=round(gflop / benchmark.stats.stats.median, 1))


@pytest.mark.parametrize("pass_", ["fwd", "wgrad", "wgrad_dpbf16", "wgrad_im2col", "dgrad"])
@pytest.mark.parametrize("cin, cout, side", SHAPES, ids=[f"{a}to{b}@{s}" for a, b, s in SHAPES])
def test_conv3x3(benchmark, cin, cout, side, pass_):
    benchmark.group = f"conv3x3 {cin}->{cout} @{side}, batch {BATCH}, bf16"
    x, w, dy = _bf16_cl(BATCH, cin, side, side), _bf16_cl(cout, cin, 3, 3), _bf16_cl(BATCH, cout, side, side)
    gflop = 2 * BATCH * side * side * cin * cout * 9 / 1e9
    if pass_ == "fwd":
        _record(benchmark, gflop, lambda: F.conv2d(x, w, padding=1))
        return
    if pass_ == "wgrad_dpbf16":
        from dawnbench_fast.csrc import conv_group_wgrad

        if not conv_group_wgrad.supported():
            pytest.skip("unavailable here: needs the C++ build and a CPU with AVX-512 BF16")
        _record(benchmark, gflop, lambda: conv_group_wgrad.conv3x3_wgrad(x, dy, w))
        return
    if pass_ == "wgrad_im2col":  # one GEMM of the unfolded input: the AMX default on 3x3 maps
        from dawnbench_fast.csrc import conv_group

        _record(benchmark, gflop, lambda: conv_group._METHODS["im2col"](x, dy, w))
        return
    mask = [pass_ == "dgrad", pass_ == "wgrad", False]
    _record(benchmark, gflop, lambda: torch.ops.aten.convolution_backward(
        dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask))


@pytest.mark.parametrize("kernel", ["dpbf16", "sparse"])
@pytest.mark.parametrize("cin, cout, side", [(24, 64, 31), (64, 256, 15), (256, 256, 7)],
                         ids=["24to64@31", "64to256@15", "256to256@7"])
def test_conv3x3_wgrad_pooled(benchmark, cin, cout, side, kernel):
    """The weight gradient of a conv whose output feeds a 2x2 max-pool."""
    from dawnbench_fast.csrc import conv_group_wgrad

    if not conv_group_wgrad.supported():
        pytest.skip("unavailable here: needs the C++ build and a CPU with AVX-512 BF16")
    benchmark.group = f"conv3x3 {cin}->{cout} @{side}, batch {BATCH}, bf16"
    x, w = _bf16_cl(BATCH, cin, side, side), _bf16_cl(cout, cin, 3, 3)
    y = torch.randn(BATCH, cout, side, side, dtype=torch.bfloat16)
    pooled, where = F.max_pool2d(y, 2, return_indices=True)
    dy = F.max_unpool2d(torch.randn_like(pooled), where, 2, output_size=(side, side))
    dy = dy.contiguous(memory_format=torch.channels_last)
    fn = conv_group_wgrad.conv3x3_wgrad_pooled if kernel == "sparse" else conv_group_wgrad.conv3x3_wgrad
    gflop = 2 * BATCH * side * side * cin * cout * 9 / 1e9
    _record(benchmark, gflop, lambda: fn(x, dy, w))


def _pool_gradient(cout: int, side: int) -> torch.Tensor:
    """dY of a conv before a 2x2 max-pool: one nonzero per window and channel."""
    y = torch.randn(BATCH, cout, side, side, dtype=torch.bfloat16)
    pooled, where = F.max_pool2d(y, 2, return_indices=True)
    dy = F.max_unpool2d(torch.randn_like(pooled), where, 2, output_size=(side, side))
    return dy.contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("kernel", ["onednn", "pooled", "pooled-fma"])
@pytest.mark.parametrize("cin, cout, side", [(24, 64, 31), (64, 256, 15), (256, 256, 7)],
                         ids=["24to64@31", "64to256@15", "256to256@7"])
def test_conv3x3_dgrad_pooled(benchmark, cin, cout, side, kernel):
    """The input gradient of a conv whose output feeds a 2x2 max-pool:
    oneDNN's dense one, the pooled kernel's pair form (vdpbf16ps, where the
    CPU has it) and its FMA form."""
    from dawnbench_fast.csrc import conv_group_dgrad

    if kernel != "onednn" and not conv_group_dgrad.supported():
        pytest.skip("unavailable here: needs the C++ build")
    benchmark.group = f"conv3x3 {cin}->{cout} @{side}, batch {BATCH}, bf16"
    x, w, dy = _bf16_cl(BATCH, cin, side, side), _bf16_cl(cout, cin, 3, 3), _pool_gradient(cout, side)
    w = w.contiguous()  # as the conv group's weight
    gflop = 2 * BATCH * side * side * cin * cout * 9 / 1e9
    if kernel != "onednn":
        pairs = kernel == "pooled"
        _record(benchmark, gflop, lambda: conv_group_dgrad.conv3x3_dgrad_pooled(dy, w, pairs))
    else:
        _record(benchmark, gflop, lambda: conv_group_dgrad.dgrad_aten(dy, x, w))


@pytest.mark.parametrize("product", ["fwd", "dgrad", "wgrad"])
def test_winograd_gemm_256_at_7(benchmark, product):
    benchmark.group = f"conv3x3 256->256 @7, batch {BATCH}, bf16"
    rows, c = BATCH * TILES_7, 256
    v, m, u = (torch.randn(16, rows, c).to(torch.bfloat16), torch.randn(16, rows, c).to(torch.bfloat16),
               torch.randn(16, c, c).to(torch.bfloat16))
    gflop = 2 * 16 * rows * c * c / 1e9
    fn = {"fwd": lambda: torch.bmm(v, u), "dgrad": lambda: torch.bmm(m, u.transpose(1, 2)),
          "wgrad": lambda: torch.bmm(v.transpose(1, 2), m)}[product]
    _record(benchmark, gflop, fn)


@pytest.mark.parametrize("cin, cout, side", SHAPES, ids=[f"{a}to{b}@{s}" for a, b, s in SHAPES])
def test_wgrad_amx_interleaved(benchmark, cin, cout, side):
    """The AMX weight gradient (csrc/conv_group_wgrad_amx_cpu.cpp) timed with
    the forward and oneDNN's weight gradient (and im2col on maps of at most
    16 pixels) of the same shape in every round, just before it, in
    alternating order: a shared host's speed moves 2-3x between minutes, so
    ``extra_info`` holds each one's median and the per-round medians of each
    time over the forward's (the comparison that survives the drift)."""
    from dawnbench_fast.csrc import conv_group, conv_group_wgrad

    if not conv_group_wgrad.amx_supported():
        pytest.skip("unavailable here: needs the C++ build and a CPU and OS with AMX tiles")
    benchmark.group = f"conv3x3 {cin}->{cout} @{side} weight gradients interleaved, batch {BATCH}, bf16"
    x, w, dy = _bf16_cl(BATCH, cin, side, side), _bf16_cl(cout, cin, 3, 3), _bf16_cl(BATCH, cout, side, side)
    others = {"fwd": lambda: F.conv2d(x, w, padding=1), "aten": lambda: conv_group._METHODS["aten"](x, dy, w)}
    if side * side <= 16:
        others["im2col"] = lambda: conv_group._METHODS["im2col"](x, dy, w)
    times: dict[str, list[float]] = {k: [] for k in others}
    ours = lambda: conv_group_wgrad.conv3x3_wgrad_amx(x, dy, w)  # noqa: E731

    def before_each_round():
        order = list(others) if len(times["fwd"]) % 2 else list(others)[::-1]
        for name in order:
            t0 = time.perf_counter()
            others[name]()
            times[name].append(time.perf_counter() - t0)

    for fn in (*others.values(), ours):
        fn()  # warm-up: oneDNN's primitives, the kernel's workspaces
    benchmark.pedantic(ours, setup=before_each_round, rounds=ROUNDS, iterations=1)
    ours_s = benchmark.stats.stats.data  # one per round, as times[...]
    med = statistics.median
    benchmark.extra_info.update(
        {f"{k}_median_ms": round(1e3 * med(v), 2) for k, v in times.items()}
        | {f"{k}_over_fwd": round(med(a / f for a, f in zip(v, times["fwd"], strict=True)), 3)
           for k, v in (("aten", times["aten"]), ("im2col", times.get("im2col", [])), ("amx", ours_s)) if v}
        | {"gflop": round(2 * BATCH * side * side * cin * cout * 9 / 1e9, 2)})
