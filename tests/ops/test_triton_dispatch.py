"""The triton backend behind --kernels: probe, one-line errors, op table,
custom-op registration (names for profiler traces, fake kernels) and the
roofline's FLOP/byte formulas (their values: tests/ops/test_op_costs.py)."""

import os
import subprocess
import sys

import pytest
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.kernels import augment_costs, bn_act_costs, conv_group_costs, gemm_costs, launches

OPS = ["channel_stats", "bn_finalize", "bn_bwd_coefficients", "affine_act", "bn_act_bwd_reduce",
       "bn_act_bwd_apply", "conv3x3_fwd", "conv3x3_pool_fwd", "conv3x3_wgrad", "gemm", "gemm_axpby",
       "augment"]


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter on")
def test_triton_resolves_on_cpu_under_the_interpreter():
    dispatch.op_table("triton")  # every op module imported: its custom ops exist
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
    assert "no CUDA device" in launches.probe(torch.device("cuda"))


@pytest.mark.parametrize("name", OPS)
def test_every_kernel_is_a_custom_op_with_fake_and_cost(name):
    op = getattr(torch.ops.dawnbench, name)
    assert op.default._schema.name == f"dawnbench::{name}"
    tables = (augment_costs, bn_act_costs, conv_group_costs, gemm_costs)
    assert any(f"dawnbench::{name}" in t.COSTS for t in tables)
    from dawnbench_fast.roofline.registry import has_cost

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
