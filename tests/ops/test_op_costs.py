"""Every ``dawnbench::`` custom op counts the same FLOPs in both counters:
torch's FlopCounterMode (given our formulas by ``register_flop_formulas``
when the op's module defines it) and the roofline's count of a profiler
trace; and our matmul/conv ops count what FlopCounterMode counts for their
torch reference, forward and backward.

Importing the op modules must be enough (no registration call here). Triton
kernels run in the interpreter on CPU tensors (tests/conftest.py), the csrc
ops through the C++ CPU build.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import bn_act as csrc_bn_act
from dawnbench_fast.models.layers import BatchNorm
from dawnbench_fast.roofline import registry
from dawnbench_fast.roofline.analysis import attribute
from dawnbench_fast.roofline.trace import load_trace

pytest.importorskip("triton")

# Every module that defines ops: the providers of the non-torch backends.
OP_MODULES = sorted({m for mods in dispatch._PROVIDERS.values() for m in mods})
for _mod in OP_MODULES:
    importlib.import_module(_mod)

OPS = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("dawnbench::"))
D = torch.ops.dawnbench
E = torch.empty(0)  # "no prologue" / "no pool indices"
G = torch.Generator().manual_seed(0)


def _r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=G).to(dtype)


def _augment_args(b: int = 3, csrc: bool = False) -> tuple:
    padded = torch.randint(0, 256, (5, 40, 40, 3), dtype=torch.uint8, generator=G)
    idx = torch.tensor([0, 4, 2][:b])
    off = torch.randint(0, 9, (2, b), dtype=torch.int32, generator=G)
    flip = torch.tensor([1, 0, 1][:b], dtype=torch.int32)
    cut = torch.randint(0, 32, (2, b), dtype=torch.int32, generator=G)
    sc, sh = torch.rand(3, generator=G), torch.rand(3, generator=G)
    if csrc:
        params = torch.stack([off[0], off[1], flip, cut[0], cut[1]], dim=1)
        return padded, idx, params, sc, sh, 32, 8, torch.float32
    return padded, idx, off[0], off[1], flip, cut[0], cut[1], 8, sc, sh, 32, torch.float32


def _bn_fwd_args() -> tuple:
    c = 8
    return (_r(2, c, 4, 4), _r(c), _r(c), torch.zeros(c), torch.ones(c), True, 1e-5, 0.1, "gelu")


def _pool_bwd_call():
    _, pooled, codes, stats, _, _ = D.csrc_pool_bn_act_fwd(_r(2, 8, 5, 4), *_bn_fwd_args()[1:])
    return D.csrc_pool_bn_act_bwd(pooled, codes, _r(2, 8, 2, 2), stats, 5, 4, True, "gelu")


# One small real call per op; activations are GELU, the one a trace assumes
# (the profiler records no str argument).
CALLS = {
    "dawnbench::channel_stats": lambda: D.channel_stats(_r(64, 8), False),
    "dawnbench::bn_finalize": lambda: D.bn_finalize(
        _r(2, 8), _r(2, 8).abs() + 64, 64.0, _r(8), _r(8), torch.zeros(8), torch.ones(8),
        0.1, 1e-5, True, True),
    "dawnbench::bn_bwd_coefficients": lambda: D.bn_bwd_coefficients(
        _r(3, 8), _r(3, 8), _r(8), _r(8).abs(), _r(8), 64.0, True),
    "dawnbench::affine_act": lambda: D.affine_act(_r(64, 8), _r(8), _r(8), "gelu"),
    "dawnbench::bn_act_bwd_reduce": lambda: D.bn_act_bwd_reduce(_r(64, 8), _r(64, 8), _r(8), _r(8),
                                                                 "gelu"),
    "dawnbench::bn_act_bwd_apply": lambda: D.bn_act_bwd_apply(
        _r(2, 4, 4, 8), _r(2, 4, 4, 8), _r(8), _r(8), _r(8), _r(8), E.to(torch.int8), [2, 4, 4, 8],
        "gelu"),
    "dawnbench::conv3x3_fwd": lambda: D.conv3x3_fwd(_r(2, 4, 4, 3), _r(27, 8), _r(3), _r(3), "gelu",
                                                     True, False),
    "dawnbench::conv3x3_pool_fwd": lambda: D.conv3x3_pool_fwd(_r(2, 4, 4, 3), _r(27, 8), E, E, "gelu",
                                                               True, False),
    "dawnbench::conv3x3_wgrad": lambda: D.conv3x3_wgrad(_r(2, 4, 4, 3), _r(2, 4, 4, 8), _r(3), _r(3),
                                                         "gelu", False),
    "dawnbench::gemm": lambda: D.gemm(_r(16, 8), _r(8, 12)),
    "dawnbench::gemm_axpby": lambda: D.gemm_axpby(_r(16, 8), _r(8, 12), _r(16, 12), 0.5, 2.0),
    "dawnbench::augment": lambda: D.augment(*_augment_args()),
    "dawnbench::csrc_augment": lambda: D.csrc_augment(*_augment_args(csrc=True)),
    "dawnbench::csrc_bn_act_fwd": lambda: D.csrc_bn_act_fwd(*_bn_fwd_args()),
    "dawnbench::csrc_bn_act_bwd": lambda: D.csrc_bn_act_bwd(
        _r(2, 8, 4, 4), _r(2, 8, 4, 4), D.csrc_bn_act_fwd(*_bn_fwd_args())[1], True, "gelu"),
    "dawnbench::csrc_pool_bn_act_fwd": lambda: D.csrc_pool_bn_act_fwd(
        _r(2, 8, 5, 4).contiguous(memory_format=torch.channels_last), *_bn_fwd_args()[1:]),
    "dawnbench::csrc_pool_bn_act_bwd": lambda: _pool_bwd_call(),
    "dawnbench::csrc_gemm_mma": lambda: D.csrc_gemm_mma(_r(16, 8, dtype=torch.half),
                                                        _r(8, 12, dtype=torch.half)),
    "dawnbench::bias_act": lambda: D.bias_act(_r(3, 7, 5, 5), _r(7), "gelu"),
    "dawnbench::bias_act_bwd": lambda: D.bias_act_bwd(_r(3, 7, 5, 5), _r(3, 7, 5, 5), _r(7), "gelu"),
    "dawnbench::csrc_bias_act": lambda: D.csrc_bias_act(_r(3, 7, 5, 5), _r(7), "gelu"),
    "dawnbench::csrc_bias_act_bwd": lambda: D.csrc_bias_act_bwd(_r(3, 7, 5, 5), _r(3, 7, 5, 5), _r(7),
                                                                "gelu"),
    "dawnbench::csrc_conv3x3_wgrad": lambda: _wgrad_call(),
    "dawnbench::csrc_conv3x3_wgrad_pooled": lambda: _wgrad_call(pooled=True),
    "dawnbench::csrc_conv3x3_wgrad_amx": lambda: _wgrad_amx_call(),
    "dawnbench::csrc_conv3x3_dgrad_pooled": lambda: D.csrc_conv3x3_dgrad_pooled(
        F.max_unpool2d(*F.max_pool2d(_r(3, 16, 4, 6), 2, return_indices=True), 2,
                       output_size=(4, 6)).bfloat16(), _r(16, 5, 3, 3, dtype=torch.bfloat16)),
    "dawnbench::csrc_conv3x3_wgrad_from_pool": lambda: _wgrad_call(from_pool=True),
    "dawnbench::csrc_conv3x3_dgrad_from_pool": lambda: D.csrc_conv3x3_dgrad_from_pool(
        _r(3, 16, 2, 3, dtype=torch.bfloat16), torch.randint(0, 4, (3, 16, 2, 3), dtype=torch.uint8),
        _r(16, 5, 3, 3, dtype=torch.bfloat16), 5, 7),
}


def _wgrad_call(pooled: bool = False, from_pool: bool = False):
    from dawnbench_fast.csrc import conv_group_wgrad

    if not conv_group_wgrad.supported():
        pytest.skip("the dpbf16 weight gradient needs AVX-512 BF16 and the C++ build")
    x, w = _r(3, 5, 4, 6, dtype=torch.bfloat16), _r(16, 5, 3, 3, dtype=torch.bfloat16)
    if from_pool:
        codes = torch.randint(0, 4, (3, 16, 2, 3), dtype=torch.uint8)
        return D.csrc_conv3x3_wgrad_from_pool(x, _r(3, 16, 2, 3, dtype=torch.bfloat16), codes, w)
    op = D.csrc_conv3x3_wgrad_pooled if pooled else D.csrc_conv3x3_wgrad
    return op(x, _r(3, 16, 4, 6, dtype=torch.bfloat16), w)


def _wgrad_amx_call():
    from dawnbench_fast.csrc import conv_group_wgrad

    if not conv_group_wgrad.amx_supported():
        pytest.skip("the AMX weight gradient needs AMX tiles and the C++ build")
    x, w = _r(3, 5, 4, 6, dtype=torch.bfloat16), _r(16, 5, 3, 3, dtype=torch.bfloat16)
    return D.csrc_conv3x3_wgrad_amx(x, _r(3, 16, 4, 6, dtype=torch.bfloat16), w)


def _flop_counts(fn) -> dict[str, int]:
    """FLOPs per op name that FlopCounterMode counts for ``fn()``."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return {p._qualified_op_name: n for p, n in counter.get_flop_counts().get("Global", {}).items()}


def _total_flops(fn) -> int:
    return sum(_flop_counts(fn).values())


def test_every_custom_op_has_both_formulas():
    assert OPS, "no dawnbench:: op defined: are the op modules importable?"
    missing = [op for op in OPS if getattr(D, op.split("::")[1]) not in flop_registry]
    assert not missing, f"defined without a FlopCounterMode formula (register_flop_formulas): {missing}"
    missing = [op for op in OPS if not registry.has_cost(op)]
    assert not missing, f"defined without a roofline cost formula (its module's COSTS): {missing}"
    untested = sorted(set(OPS) - set(CALLS))
    assert not untested, f"add a small call for {untested} to CALLS in this file"


@pytest.mark.parametrize("op", sorted(CALLS))
def test_flop_counter_counts_what_the_trace_counts(op, tmp_path):
    if op not in OPS:
        pytest.skip(f"{op} is not defined in this install")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        counted = _flop_counts(CALLS[op])
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    # the roofline's own reading of the trace (it counts one of nested same-name events)
    units = [u for u in attribute(load_trace(tmp_path / "trace.json")).units
             if u.op.name == op and u.counted]
    assert units, f"{op} not counted in the trace"
    from_trace = sum(u.flops for u in units)
    assert from_trace > 0
    assert counted.get(op, 0) == from_trace


def test_flop_counter_knows_the_activation_a_trace_does_not():
    # a live count reads the str argument; a trace's count assumes GELU
    x, w, s = _r(2, 4, 4, 3), _r(27, 8), _r(3)
    relu = _flop_counts(lambda: D.conv3x3_fwd(x, w, s, s, "relu", False, False))["dawnbench::conv3x3_fwd"]
    shapes, dtypes = [[2, 4, 4, 3], [27, 8], [3], [3], [], [], []], ["float"] * 4 + ["", "Scalar", "Scalar"]
    assert relu == registry.count("dawnbench::conv3x3_fwd", shapes, dtypes,
                                  ["", "", "", "", "relu", "False", "False"])[0]
    assert relu < registry.count("dawnbench::conv3x3_fwd", shapes, dtypes)[0]


# -- matmul/conv ops against their torch reference ---------------------------
# (element-wise and normalisation ops have no counted reference: torch counts
# 0 FLOPs for them, so the checks above are theirs.)


def _conv_ref_args():
    x, w = _r(2, 3, 4, 6), _r(8, 3, 3, 3)
    return x, w, x.permute(0, 2, 3, 1).contiguous(), w.permute(2, 3, 1, 0).reshape(27, 8).contiguous()


def test_conv_forward_matches_reference():
    x, w, x_nhwc, wmat = _conv_ref_args()
    ref = _total_flops(lambda: F.conv2d(x, w, padding=1))
    assert _total_flops(lambda: D.conv3x3_fwd(x_nhwc, wmat, E, E, "gelu", False, False)) == ref
    pooled = _total_flops(lambda: F.max_pool2d(F.conv2d(x, w, padding=1), 2))
    assert _total_flops(lambda: D.conv3x3_pool_fwd(x_nhwc, wmat, E, E, "gelu", False, False)) == pooled


def test_conv_backward_matches_reference():
    # data gradient = the forward kernel on flipped filters; weight gradient = wgrad
    x, w, x_nhwc, _ = _conv_ref_args()
    dy = _r(2, 8, 4, 6)
    dy_nhwc = dy.permute(0, 2, 3, 1).contiguous()
    wflip = w.flip(2, 3).transpose(0, 1).permute(2, 3, 1, 0).reshape(72, 3).contiguous()

    def ref(mask):
        return _total_flops(lambda: torch.ops.aten.convolution_backward(
            dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask))

    wgrad = _total_flops(lambda: D.conv3x3_wgrad(x_nhwc, dy_nhwc, E, E, "gelu", False))
    dgrad = _total_flops(lambda: D.conv3x3_fwd(dy_nhwc, wflip, E, E, "identity", False, False))
    assert wgrad == ref([False, True, False])
    assert dgrad + wgrad == ref([True, True, False])


def test_gemm_forward_and_backward_match_reference():
    a, b = _r(16, 8).requires_grad_(), _r(8, 12).requires_grad_()
    ref = _total_flops(lambda: (a @ b).sum().backward())
    assert ref == 3 * 2 * 16 * 8 * 12
    assert _total_flops(lambda: D.gemm(a, b).sum().backward()) == ref
    ah, bh = a.detach().half(), b.detach().half()
    assert _total_flops(lambda: D.csrc_gemm_mma(ah, bh)) == _total_flops(lambda: ah @ bh)


def test_gemm_axpby_is_the_reference_plus_its_epilogue():
    a, b, d = _r(16, 8), _r(8, 12), _r(16, 12)
    ref = _total_flops(lambda: 0.5 * (a @ b) + 2.0 * d)  # torch counts the mm only
    # alpha * ab + beta * d: 3 FLOPs per output element that torch does not count
    assert _total_flops(lambda: D.gemm_axpby(a, b, d, 0.5, 2.0)) == ref + 3 * 16 * 12


# -- moved from tests/ops/test_triton_dispatch.py and tests/test_csrc_cpu.py (op refactor) --
def test_cost_formulas():
    from dawnbench_fast.roofline.registry import count

    flops, nbytes = count("dawnbench::gemm", [[64, 32], [32, 16]], ["c10::BFloat16"] * 2)
    assert flops == 2 * 64 * 32 * 16 and nbytes == (64 * 32 + 32 * 16 + 64 * 16) * 2
    # conv 3x3, 8x8 -> pooled 4x4, Cin 24, Cout 64, bf16, no prologue
    shapes = [[2, 8, 8, 24], [216, 64], [0], [0], [], [], []]
    f, b = count("dawnbench::conv3x3_pool_fwd", shapes, ["c10::BFloat16", "c10::BFloat16",
                                                          "float", "float", "", "", ""])
    assert f == 2 * 2 * 8 * 8 * 24 * 64 * 9
    assert b >= (2 * 8 * 8 * 24 + 216 * 64 + 2 * 4 * 4 * 64) * 2


def test_profiler_sees_the_custom_ops_and_roofline_has_their_costs():
    from torch.profiler import ProfilerActivity, profile

    from dawnbench_fast.csrc import augment_costs, bias_act_costs, bn_act_costs, conv_group_costs, gemm_costs

    x = torch.randn(4, 8, 5, 5, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        csrc_bn_act.bn_act(x, BatchNorm(8), "gelu").sum().backward()
    names = {e.name for e in prof.events()}
    assert {"dawnbench::csrc_bn_act_fwd", "dawnbench::csrc_bn_act_bwd"} <= names
    for table in (augment_costs, bias_act_costs, bn_act_costs, conv_group_costs, gemm_costs):
        for name in table.COSTS:
            assert registry.has_cost(name), name
    flops, nbytes = bn_act_costs.bn_act_fwd_cost([[4, 8, 5, 5], [8], [8], [8], [8]],
                                                 ["float"] * 5, [None] * 8 + ["'relu'"])
    assert flops == (3 + 2 + 1) * 800 and nbytes == 2 * 800 * 4 + 6 * 4 * 8
    assert gemm_costs.gemm_mma_cost([[64, 32], [32, 16]], ["c10::Half"] * 2) == (
        2 * 64 * 16 * 32, 64 * 32 * 2 + 32 * 16 * 2 + 64 * 16 * 4)
    # the weight gradient counts as aten's convolution_backward counts its weight half
    x, g, w = torch.randn(3, 5, 4, 6), torch.randn(3, 16, 4, 6), torch.randn(16, 5, 3, 3)
    aten = _total_flops(lambda: torch.ops.aten.convolution_backward(
        g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False]))
    assert conv_group_costs.conv3x3_wgrad_cost([[3, 5, 4, 6], [3, 16, 4, 6], [16, 5, 3, 3]],
                                               ["c10::BFloat16"] * 3) == (aten, (360 + 1152 + 720) * 2)
