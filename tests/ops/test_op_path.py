"""The two paths of a fused op's call (dawnbench_fast/op_path.py): the plain
autograd Function in eager mode and the registered custom ops whenever
someone looks (profiler, dispatch mode, compile, DAWNBENCH_OP_PATH=custom)
launch the same kernels, so their results agree bit for bit."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from dawnbench_fast import dispatch, op_path
from dawnbench_fast.models.layers import BatchNorm

pytestmark = pytest.mark.usefixtures("seed_from_test_id", "small_interpreter_tiles")


def _face(name: str):
    why = dispatch.unavailable_reason(name, torch.device("cpu"))
    if why is not None:
        pytest.skip(why)
    return dispatch.get_op("bn_act", name)


def _run(op, x0, bn0, g, training):
    x, bn = x0.clone().requires_grad_(True), copy.deepcopy(bn0)
    bn.weight.requires_grad_(True)
    bn.train(training)
    y = op(x, bn, "silu")
    y.backward(g)
    return [y, x.grad, bn.weight.grad, bn.bias.grad, bn.running_mean, bn.running_var,
            bn.num_batches_tracked]


@pytest.mark.parametrize("face", ["cpu", "triton"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_plain_and_custom_paths_agree_bit_for_bit(monkeypatch, face, training, dtype):
    op = _face(face)
    x0 = (torch.randn(3, 37, 5, 7) * 2 + 0.4).to(dtype).contiguous(memory_format=torch.channels_last)
    g = torch.randn_like(x0)
    bn0 = BatchNorm(37)
    bn0.bias.data.normal_()
    bn0.weight.data.uniform_(0.5, 1.5)
    bn0.running_mean.normal_()
    bn0.running_var.uniform_(0.5, 2)
    monkeypatch.delenv(op_path.ENV, raising=False)
    assert op_path.plain_eager()
    plain = _run(op, x0, bn0, g, training)
    monkeypatch.setenv(op_path.ENV, "custom")
    assert not op_path.plain_eager()
    custom = _run(op, x0, bn0, g, training)
    for p, c in zip(plain, custom, strict=True):
        assert torch.equal(p, c)
    assert torch.equal(plain[4], bn0.running_mean) != training  # running stats move in training only


def test_triton_conv_group_paths_agree_bit_for_bit(monkeypatch):
    from dawnbench_fast.models.layers import ConvGroup

    op = pytest.importorskip("dawnbench_fast.kernels.conv_group").conv_group
    group = ConvGroup(5, 7, "silu")
    x0 = torch.randn(2, 5, 6, 5)
    runs = []
    for path in ("auto", "custom"):
        monkeypatch.setenv(op_path.ENV, path)
        g, x = copy.deepcopy(group), x0.clone().requires_grad_(True)
        y = op(g, x)
        y.backward(torch.ones_like(y) + y.detach())
        runs.append([y, x.grad, g.conv1.weight.grad, g.conv2.weight.grad, g.norm1.running_mean,
                     g.norm2.running_var])
    for p, c in zip(*runs, strict=True):
        assert torch.equal(p, c)


def test_anyone_looking_takes_the_custom_ops(monkeypatch):
    monkeypatch.delenv(op_path.ENV, raising=False)
    assert op_path.plain_eager()
    with FlopCounterMode(display=False):
        assert not op_path.plain_eager()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert not op_path.plain_eager()
    assert op_path.plain_eager()


def test_the_profiler_sees_the_custom_op_names():
    op = _face("cpu")
    x = torch.randn(2, 8, 3, 3, requires_grad=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        op(x, BatchNorm(8), "relu").sum().backward()
    names = {e.name for e in prof.events()}
    assert {"dawnbench::csrc_bn_act_fwd", "dawnbench::csrc_bn_act_bwd"} <= names


def test_an_unknown_path_is_a_one_line_error(monkeypatch):
    monkeypatch.setenv(op_path.ENV, "fast")
    with pytest.raises(ValueError, match="DAWNBENCH_OP_PATH='fast'"):
        op_path.plain_eager()
