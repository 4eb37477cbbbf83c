"""FLOP and minimal-byte formulas of the cpu conv group's weight- and
data-gradient custom ops (csrc/conv_group_wgrad.py, csrc/conv_group_dgrad.py)
for the roofline tool: FLOP = 2 x MAC; bytes = every tensor input read once +
every output written once; arguments as the profiler records them, ``[]``
for non-tensors.

Data only (no extension, no CuPy): the roofline finds ``COSTS`` through its
``dawnbench_fast.costs`` entry point (pyproject.toml); csrc/conv_group_wgrad.py
and csrc/conv_group_dgrad.py hand it to
``roofline.registry.register_flop_formulas`` for FlopCounterMode.
"""

from __future__ import annotations

from dawnbench_fast.roofline.trace_args import arg_bytes, arg_numel


def conv3x3_wgrad_cost(shapes, dtypes, concrete=None):
    """3x3 weight gradient, counted as aten counts the convolution: 2 x N H W
    Cin Cout 9 (the border taps the kernel skips included, so the figure
    compares with oneDNN's); reads x and dY, writes dW (w's shape)."""
    x, g, w = shapes[0], shapes[1], shapes[2]
    flops = 2 * arg_numel(g) * (w[1] if len(w) > 1 else 0) * 9
    return flops, arg_bytes(x, dtypes[0]) + arg_bytes(g, dtypes[1]) + arg_bytes(w, dtypes[2])


def conv3x3_wgrad_amx_cost(shapes, dtypes, concrete=None):
    """The AMX weight gradient: the products it computes, over every position
    of the maps with their zero row and column (2 x N (H+1) (W+1) Cin Cout 9:
    1.31x aten's count at 7x7); reads x and dY, writes dW."""
    x, g, w = shapes[0], shapes[1], shapes[2]
    rows = g[0] * (g[2] + 1) * (g[3] + 1) if len(g) == 4 else 0
    flops = 2 * rows * (g[1] if len(g) > 1 else 0) * (w[1] if len(w) > 1 else 0) * 9
    return flops, arg_bytes(x, dtypes[0]) + arg_bytes(g, dtypes[1]) + arg_bytes(w, dtypes[2])


def conv3x3_wgrad_pooled_cost(shapes, dtypes, concrete=None):
    """The weight gradient before a 2x2 max-pool: the products it computes,
    one per pool window (2 x N floor(H/2) floor(W/2) Cin Cout 9, border taps
    included); reads x and dY, writes dW."""
    x, g, w = shapes[0], shapes[1], shapes[2]
    windows = g[0] * g[1] * (g[2] // 2) * (g[3] // 2) if len(g) == 4 else 0
    flops = 2 * windows * (w[1] if len(w) > 1 else 0) * 9
    return flops, arg_bytes(x, dtypes[0]) + arg_bytes(g, dtypes[1]) + arg_bytes(w, dtypes[2])


def conv3x3_dgrad_pooled_cost(shapes, dtypes, concrete=None):
    """The data gradient before a 2x2 max-pool (dY, w): the products it
    computes, 9 taps x I input channels for each of dY's nonzeros, counted as
    one per pool window and output channel (2 x N floor(H/2) floor(W/2) O 9 I;
    taps that fall off the map included, as the kernel adds them to a border
    it drops; a window whose upstream gradient is exactly 0 is skipped by the
    kernel and still counted; the zero lanes of a last block of fewer than
    16 input channels are not counted); reads dY (dense) and w, writes dX
    (N, I, H, W) in dY's dtype."""
    g, w = shapes[0], shapes[1]
    if len(g) != 4 or len(w) != 4:
        return 0, 0
    windows = g[0] * (g[2] // 2) * (g[3] // 2)
    flops = 2 * windows * g[1] * 9 * w[1]
    dx = [g[0], w[1], g[2], g[3]]
    return flops, arg_bytes(g, dtypes[0]) + arg_bytes(w, dtypes[1]) + arg_bytes(dx, dtypes[0])


def conv3x3_wgrad_from_pool_cost(shapes, dtypes, concrete=None):
    """conv3x3_wgrad_pooled from the pool's own gradient (x, dp, codes, w): the
    same products (2 x N H/2 W/2 Cin Cout 9); reads x, dp and the one-byte
    codes, writes dW."""
    x, dp, codes, w = shapes[0], shapes[1], shapes[2], shapes[3]
    flops = 2 * arg_numel(dp) * (w[1] if len(w) > 1 else 0) * 9
    return flops, (arg_bytes(x, dtypes[0]) + arg_bytes(dp, dtypes[1]) + arg_numel(codes)
                   + arg_bytes(w, dtypes[3]))


def conv3x3_dgrad_from_pool_cost(shapes, dtypes, concrete=None):
    """conv3x3_dgrad_pooled from the pool's own gradient (dp, codes, w, in_h,
    in_w): the same products (2 x N H/2 W/2 O 9 I); reads dp, the codes and w,
    writes dX (N, I, in_h, in_w; 4x dp's pixels where the trace lacks them)."""
    dp, codes, w = shapes[0], shapes[1], shapes[2]
    if len(dp) != 4 or len(w) != 4:
        return 0, 0
    try:
        in_hw = int(concrete[3]) * int(concrete[4])
    except (TypeError, ValueError, IndexError):
        in_hw = 4 * dp[2] * dp[3]
    flops = 2 * arg_numel(dp) * 9 * w[1]
    dx = dp[0] * w[1] * in_hw
    return flops, (arg_bytes(dp, dtypes[0]) + arg_numel(codes) + arg_bytes(w, dtypes[2])
                   + dx * arg_bytes([1], dtypes[0]))


COSTS = {
    "dawnbench::csrc_conv3x3_wgrad": (conv3x3_wgrad_cost, True),
    "dawnbench::csrc_conv3x3_wgrad_pooled": (conv3x3_wgrad_pooled_cost, True),
    "dawnbench::csrc_conv3x3_wgrad_amx": (conv3x3_wgrad_amx_cost, True),
    "dawnbench::csrc_conv3x3_dgrad_pooled": (conv3x3_dgrad_pooled_cost, True),
    "dawnbench::csrc_conv3x3_wgrad_from_pool": (conv3x3_wgrad_from_pool_cost, True),
    "dawnbench::csrc_conv3x3_dgrad_from_pool": (conv3x3_dgrad_from_pool_cost, True),
}
