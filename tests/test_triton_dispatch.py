"""The triton backend behind --kernels: probe, one-line errors, op table,
custom-op registration (names for profiler traces, fake kernels) and the
roofline's FLOP/byte formulas."""

import os
import subprocess
import sys

import pytest
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.kernels import costs, custom_ops, ops

OPS = ["channel_stats", "bn_finalize", "affine_act", "bn_act_bwd_reduce", "bn_act_bwd_apply",
       "conv3x3_fwd", "conv3x3_pool_fwd", "conv3x3_wgrad", "gemm", "gemm_axpby", "augment"]


def test_triton_resolves_on_cpu_under_the_interpreter():
    assert dispatch.resolve_backend("triton", "cpu") == "triton"
    table = dispatch.op_table("triton", ["conv_group", "bn_act", "augment", "linear", "matmul",
                                          "newton_schulz"])
    assert {v["backend"] for v in table.values()} == {"triton"}


def test_triton_on_cpu_without_interpreter_is_a_one_line_error():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("from dawnbench_fast import dispatch\n"
            "try:\n    dispatch.resolve_backend('triton', 'cpu')\n"
            "except dispatch.KernelsUnavailable as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    msg = out.stdout.strip()
    assert out.returncode == 0 and len(msg.splitlines()) == 1, out.stderr[-2000:]
    assert msg.startswith("--kernels triton:") and "CUDA" in msg and "TRITON_INTERPRET=1" in msg


def test_probe_rejects_cuda_without_a_device():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert "no CUDA device" in ops._probe(torch.device("cuda"))


@pytest.mark.parametrize("name", OPS)
def test_every_kernel_is_a_custom_op_with_fake_and_cost(name):
    op = getattr(torch.ops.dawnbench, name)
    assert op.default._schema.name == f"dawnbench::{name}"
    assert f"dawnbench::{name}" in costs.COSTS
    from dawnbench_fast.roofline.costs import has_cost

    assert has_cost(f"dawnbench::{name}")


def test_fake_kernels_give_shapes_without_running():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        x = mode.from_tensor(torch.empty(2, 9, 7, 5))
        w = mode.from_tensor(torch.empty(45, 12))
        e = mode.from_tensor(torch.empty(0))
        y, idx, _, _ = torch.ops.dawnbench.conv3x3_pool_fwd(x, w, e, e, "gelu", False, False)
        c = torch.ops.dawnbench.gemm(mode.from_tensor(torch.empty(3, 4)),
                                     mode.from_tensor(torch.empty(4, 6)))
    assert tuple(y.shape) == (2, 4, 3, 12) and idx.dtype == torch.int8
    assert tuple(c.shape) == (3, 6)


def test_cost_formulas():
    from dawnbench_fast.roofline.costs import count

    flops, nbytes = count("dawnbench::gemm", [[64, 32], [32, 16]], ["c10::BFloat16"] * 2)
    assert flops == 2 * 64 * 32 * 16 and nbytes == (64 * 32 + 32 * 16 + 64 * 16) * 2
    # conv 3x3, 8x8 -> pooled 4x4, Cin 24, Cout 64, bf16, no prologue
    shapes = [[2, 8, 8, 24], [216, 64], [0], [0], [], [], []]
    f, b = count("dawnbench::conv3x3_pool_fwd", shapes, ["c10::BFloat16", "c10::BFloat16",
                                                          "float", "float", "", "", ""])
    assert f == 2 * 2 * 8 * 8 * 24 * 64 * 9
    assert b >= (2 * 8 * 8 * 24 + 216 * 64 + 2 * 4 * 4 * 64) * 2


def test_launch_counts_record_kernel_runs():
    from dawnbench_fast.kernels import launch_counts

    n = launch_counts["affine_act"]
    custom_ops.affine_act(torch.randn(5, 3), torch.ones(3), torch.zeros(3), "relu")
    assert launch_counts["affine_act"] == n + 1
