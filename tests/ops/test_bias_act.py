"""bias_act: y = act(x + bias[None, :, None, None]), every backend against the
reference (dawnbench_fast.layer_ops.bias_act), forward and the gradients of x
and bias, in fp32/bf16/fp16, NCHW, channels_last and strided inputs, sizes
that are no multiple of any block (C=7, H=W=5, N=3); then the C++ build's raw
entry points (outputs poisoned with NaN, sizes past the OpenMP threshold and
the row blocks) and each face's one-line errors.

bf16 under Triton is tested for storage and conversion only: the interpreter
has no bf16 arithmetic, and the kernels widen everything to fp32 first.
"""

from __future__ import annotations

import pytest
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import bias_act as csrc_bias_act
from dawnbench_fast.csrc import native
from dawnbench_fast.csrc.engine import DTYPE_CODES
from dawnbench_fast.kernels import launch_counts
from dawnbench_fast.kernels.launches import poisoned_outputs
from dawnbench_fast.vocabulary import ACTIVATIONS, activation

reference = dispatch.reference("bias_act")
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (rtol, atol) of a value rounded once to the dtype vs the same fp32 math rounded
# by another backend: one unit in the last place, and the host erf/exp's 2e-7.
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1.6e-2), torch.float16: (2e-3, 2e-3)}
LAYOUTS = ["nchw", "nhwc", "strided"]


pytestmark = pytest.mark.usefixtures("seed_from_test_id", "small_interpreter_tiles")


def _input(shape, dtype, layout, device="cpu"):
    """Fresh random x in the layout: dense NCHW, channels_last, or a strided view."""
    if layout == "strided":  # every other column of a wider tensor: dense in neither format
        n, c, h, w = shape
        return (torch.randn(n, c, h, 2 * w, device=device) * 2 + 0.3).to(dtype)[..., ::2]
    x = (torch.randn(shape, device=device) * 2 + 0.3).to(dtype)
    return x.contiguous(memory_format=torch.channels_last) if layout == "nhwc" else x


@pytest.fixture(scope="module")
def C():
    reason = native.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return native.load()


def _close(got, want, dtype, scale=1.0, what=""):
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol * scale, msg=what)


def _check_forward_backward(op, device, shape, layout, dtype, act):
    x = _input(shape, dtype, layout, device).requires_grad_(True)
    bias = torch.randn(shape[1], device=device).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)  # clone keeps the memory format
    bias_ref = bias.detach().clone().requires_grad_(True)
    dy = torch.randn(shape, device=device).to(dtype)
    with poisoned_outputs():
        y = op(x, bias, act)
        y.backward(dy)
    y_ref = reference(x_ref, bias_ref, act)
    y_ref.backward(dy)
    assert y.dtype == dtype and y.shape == x.shape
    if layout == "nhwc":
        assert y.is_contiguous(memory_format=torch.channels_last)
    _close(y, y_ref, dtype, what="y")
    assert x.grad.dtype == dtype and bias.grad.dtype == torch.float32
    _close(x.grad, x_ref.grad, dtype, scale=float(x_ref.grad.abs().max()) + 1.0, what="dx")
    n = x.numel() // shape[1]
    torch.testing.assert_close(bias.grad, bias_ref.grad, rtol=1e-4, atol=1e-5 * n, msg="dbias")


SHAPES = [(3, 7, 5, 5), (2, 70, 3, 3)]


# ---------------------------------------------------------------- every backend
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_bias_act_forward_backward(implementation, backend, device, shape, layout, dtype, act):
    op = implementation("bias_act")
    before = launch_counts["bias_act_bwd"]
    _check_forward_backward(op, device, shape, layout, dtype, act)
    if backend == "triton":
        assert launch_counts["bias_act_bwd"] == before + 1  # our kernel ran, not the reference


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_csrc_face_on_cpu_tensors(C, shape, layout, dtype, act):
    """The C++ face with its autograd on CPU tensors (the shared math of the
    CUDA kernels): the cpu backend does not serve it (dispatch.CATALOGUE's
    no_face), so the backend test above skips it."""
    _check_forward_backward(csrc_bias_act.bias_act, torch.device("cpu"), shape, layout, dtype, act)


def test_bf16_bias_gets_a_bf16_gradient(implementation, device):
    op = implementation("bias_act")
    x = _input((3, 7, 5, 5), torch.bfloat16, "nhwc", device).requires_grad_(True)
    bias = torch.randn(7, device=device).bfloat16().requires_grad_(True)
    bias_ref = bias.detach().clone().requires_grad_(True)
    op(x, bias, "silu").float().sum().backward()
    reference(x.detach(), bias_ref, "silu").float().sum().backward()
    assert bias.grad.dtype == torch.bfloat16
    torch.testing.assert_close(bias.grad.float(), bias_ref.grad.float(), rtol=1.6e-2, atol=1e-3)


def test_bad_act_or_bias_size_is_a_one_line_error(implementation, device):
    op = implementation("bias_act")
    x = _input((3, 7, 5, 5), torch.float32, "nchw", device)
    with pytest.raises(ValueError, match="unknown activation 'tanh'") as e:
        op(x, torch.randn(7, device=device), "tanh")
    assert len(str(e.value).splitlines()) == 1
    for bias in (torch.randn(6, device=device), torch.randn(1, 7, device=device)):
        with pytest.raises(ValueError, match=r"bias must be \(7,\)") as e:
            op(x, bias, "gelu")
        assert len(str(e.value).splitlines()) == 1


# ---------------------------------------------------------------- csrc (CPU build)
@pytest.mark.parametrize("shape", [(3, 7, 5, 5), (4, 33, 40, 41), (2, 5, 1, 1)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cl", [0, 1], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_csrc_raw_calls_fill_every_poisoned_output(C, shape, dtype, cl, act):
    """The entry points write every element of preallocated NaN buffers; the
    (4, 33, 40, 41) case crosses the OpenMP threshold and the NHWC row blocks."""
    n, c, h, w = shape
    x = _input(shape, dtype, "nhwc" if cl else "nchw")
    bias, dy = torch.randn(c), torch.randn(shape).to(dtype)
    dy = dy.contiguous(memory_format=torch.channels_last) if cl else dy
    fmt = torch.channels_last if cl else torch.contiguous_format
    y, dx = (torch.full(shape, float("nan"), dtype=dtype).contiguous(memory_format=fmt) for _ in range(2))
    dbias = torch.full((c,), float("nan"))
    code = activation(act).code
    C.bias_act_forward(DTYPE_CODES[dtype], x.data_ptr(), bias.data_ptr(), y.data_ptr(), n, c, h * w,
                       cl, code)
    C.bias_act_backward(DTYPE_CODES[dtype], x.data_ptr(), dy.data_ptr(), bias.data_ptr(), dx.data_ptr(),
                        dbias.data_ptr(), n, c, h * w, cl, code)
    assert not (y.isnan().any() or dx.isnan().any() or dbias.isnan().any())
    x_ref, bias_ref = x.clone().requires_grad_(True), bias.clone().requires_grad_(True)
    y_ref = reference(x_ref, bias_ref, act)
    y_ref.backward(dy)
    _close(y, y_ref, dtype, what="y")
    _close(dx, x_ref.grad, dtype, scale=float(x_ref.grad.abs().max()) + 1.0, what="dx")
    torch.testing.assert_close(dbias, bias_ref.grad, rtol=1e-4, atol=1e-5 * n * h * w)


def test_csrc_bias_gradient_is_deterministic():
    x = _input((4, 33, 40, 41), torch.float32, "nhwc").requires_grad_(True)
    bias = torch.randn(33).requires_grad_(True)
    grads = []
    for _ in range(2):
        bias.grad = None
        csrc_bias_act.bias_act(x, bias, "gelu").sum().backward()
        grads.append(bias.grad.clone())
    assert torch.equal(*grads)


def test_csrc_custom_op_checks_its_arguments():
    """The custom op is callable on its own (torch.ops.dawnbench): it checks what
    its raw pointers would misread, each a one-line error."""
    x = torch.randn(3, 7, 5, 5)
    with pytest.raises(ValueError, match="csrc_bias_act: bias must be"):
        torch.ops.dawnbench.csrc_bias_act(x, torch.randn(8), "relu")
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        torch.ops.dawnbench.csrc_bias_act(x.double(), torch.randn(7), "relu")
    with pytest.raises(ValueError, match="dy .* does not match"):
        torch.ops.dawnbench.csrc_bias_act_bwd(torch.randn(3, 7, 5, 4), x, torch.randn(7), "relu")
