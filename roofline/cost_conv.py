"""Convolution forward and backward: FLOPs = 2 x MAC, MAC = output elements x
(input channels / groups) x kernel volume; bytes = input + weight (+ bias) read,
output written. Backward computes grad_input and grad_weight (each as many MACs
as the forward) and grad_bias (a reduction, 1 FLOP per grad_output element),
as its output_mask says. Bias adds in the forward are not counted as FLOPs."""

from __future__ import annotations

from collections.abc import Sequence

from dawnbench_fast.roofline.cost_table import CostTable
from dawnbench_fast.roofline.trace_args import is_tensor, itemsize, numel, parse_int, parse_list, tensor_bytes

COSTS = CostTable()  # registered by roofline.registry


def conv_out_spatial(
    in_spatial: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool = False,
    output_padding: Sequence[int] | None = None,
) -> list[int]:
    """Output spatial size of a convolution (PyTorch's formula)."""
    n = len(in_spatial)

    def expand(v: Sequence[int], default: int) -> list[int]:
        v = list(v) if v else [default]
        return v * n if len(v) == 1 else v

    k, s, p, d = expand(kernel, 1), expand(stride, 1), expand(padding, 0), expand(dilation, 1)
    if transposed:
        op = expand(output_padding or [0], 0)
        return [
            (i - 1) * s[j] - 2 * p[j] + d[j] * (k[j] - 1) + op[j] + 1
            for j, i in enumerate(in_spatial)
        ]
    return [(i + 2 * p[j] - d[j] * (k[j] - 1) - 1) // s[j] + 1 for j, i in enumerate(in_spatial)]


def conv_macs(x: Sequence[int], w: Sequence[int], out_spatial: Sequence[int], transposed: bool) -> int:
    """MACs of a (possibly transposed, grouped) convolution forward."""
    if transposed:
        # weight (Cin, Cout/g, k...): every input element meets Cout/g x k filters
        return numel(x) * w[1] * numel(w[2:])
    # weight (Cout, Cin/g, k...): every output element is a Cin/g x k dot product
    return x[0] * w[0] * numel(out_spatial) * w[1] * numel(w[2:])


def _forward(
    shapes: list, dtypes: list, stride: list | None, padding: list | None, dilation: list | None,
    transposed: bool = False, output_padding: list | None = None, groups: int = 1,
) -> tuple[float, float] | None:
    if len(shapes) < 2 or not shapes[0] or not shapes[1]:
        return None
    x, w = shapes[0], shapes[1]
    if padding is None or stride is None or dilation is None:
        return None  # e.g. padding="same" recorded as a string: count the child op
    out_sp = conv_out_spatial(x[2:], w[2:], stride, padding, dilation, transposed, output_padding)
    macs = conv_macs(x, w, out_sp, transposed)
    cout = w[1] * groups if transposed else w[0]
    out_shape = [x[0], cout, *out_sp]
    nbytes = tensor_bytes(x, dtypes[0]) + tensor_bytes(w, dtypes[1])
    if len(shapes) > 2 and is_tensor(dtypes[2]) and shapes[2]:
        # the bias add is not counted as FLOPs (2 x MAC only, as the analytic
        # counts and FlopCounterMode do); its bytes are
        nbytes += tensor_bytes(shapes[2], dtypes[2])
    nbytes += numel(out_shape) * itemsize(dtypes[0])
    return 2 * macs, nbytes


def _lists(conc: list, *idx: int) -> list[list | None]:
    return [parse_list(conc[i]) if i < len(conc) else None for i in idx]


@COSTS.cost("aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::_convolution_mode")
def conv_nd(shapes: list, dtypes: list, conc: list) -> tuple[float, float] | None:
    # (input, weight, bias, stride, padding, dilation, groups)
    stride, padding, dilation = _lists(conc, 3, 4, 5)
    return _forward(shapes, dtypes, stride, padding, dilation)


@COSTS.cost("aten::convolution", "aten::_convolution", "aten::convolution_overrideable")
def convolution(shapes: list, dtypes: list, conc: list) -> tuple[float, float] | None:
    # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...)
    stride, padding, dilation, output_padding = _lists(conc, 3, 4, 5, 7)
    transposed = len(conc) > 6 and conc[6] == "True"
    groups = parse_int(conc[8], 1) if len(conc) > 8 else 1
    return _forward(shapes, dtypes, stride, padding, dilation, transposed, output_padding, groups)


@COSTS.cost("aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d")
def conv_transpose(shapes: list, dtypes: list, conc: list) -> tuple[float, float] | None:
    # (input, weight, bias, stride, padding, output_padding, groups, dilation)
    stride, padding, output_padding, dilation = _lists(conc, 3, 4, 5, 7)
    groups = parse_int(conc[6], 1) if len(conc) > 6 else 1
    return _forward(shapes, dtypes, stride, padding, dilation, True, output_padding, groups)


@COSTS.cost("aten::mkldnn_convolution")
def mkldnn_convolution(shapes: list, dtypes: list, conc: list) -> tuple[float, float] | None:
    # (input, weight, bias, padding, stride, dilation, groups): padding first
    padding, stride, dilation = _lists(conc, 3, 4, 5)
    return _forward(shapes, dtypes, stride, padding, dilation)


@COSTS.cost("aten::cudnn_convolution", "aten::miopen_convolution", "aten::_slow_conv2d_forward",
      "aten::thnn_conv2d", "aten::_nnpack_spatial_convolution")
def conv_backend(shapes: list, dtypes: list, conc: list) -> tuple[float, float] | None:
    # cudnn_convolution(input, weight, padding, stride, dilation, groups, ...);
    # the slow/thnn kernels take (input, weight, kernel_size, bias, stride, padding)
    if len(dtypes) > 2 and is_tensor(dtypes[2]):
        return None
    padding, stride, dilation = _lists(conc, 2, 3, 4)
    return _forward(shapes, dtypes, stride, padding, dilation)


@COSTS.cost("aten::convolution_backward", "aten::convolution_backward_overrideable")
def convolution_backward(shapes: list, dtypes: list, conc: list) -> tuple | None:
    # (grad_output, input, weight, bias_sizes, stride, padding, dilation,
    #  transposed, output_padding, groups, output_mask)
    if len(shapes) < 3 or not shapes[0] or not shapes[1] or not shapes[2]:
        return None
    gy, x, w = shapes[0], shapes[1], shapes[2]
    transposed = len(conc) > 7 and conc[7] == "True"
    mask = parse_list(conc[10]) if len(conc) > 10 else None
    if not mask or len(mask) != 3:
        mask = [True, True, bool(parse_list(conc[3]) if len(conc) > 3 else False)]
    # MACs of the forward, from the recorded grad_output size (no padding maths)
    macs = conv_macs(x, w, gy[2:], transposed)
    flops = 0.0
    bias_flops = 0.0
    nbytes = float(tensor_bytes(gy, dtypes[0]))
    if mask[0]:  # grad_input: reads grad_output and weight, writes grad_input
        flops += 2 * macs
        nbytes += tensor_bytes(w, dtypes[2]) + tensor_bytes(x, dtypes[1])
    if mask[1]:  # grad_weight: reads grad_output and input, writes grad_weight
        flops += 2 * macs
        nbytes += tensor_bytes(x, dtypes[1]) + tensor_bytes(w, dtypes[2])
    if mask[2]:  # grad_bias: a sum over everything but the channel
        bias_flops = float(numel(gy))
        nbytes += gy[1] * itemsize(dtypes[0])
    # third element: only the 2 x MAC part belongs to the matmul/conv subtotal
    return flops + bias_flops, nbytes, flops


# These ops' FLOPs form the "matmul/conv" subtotal of a report.
COSTS.mark_matmul(
    "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::_convolution_mode",
    "aten::convolution", "aten::_convolution", "aten::convolution_overrideable",
    "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d",
    "aten::mkldnn_convolution", "aten::cudnn_convolution", "aten::miopen_convolution",
    "aten::_slow_conv2d_forward", "aten::thnn_conv2d", "aten::_nnpack_spatial_convolution",
    "aten::convolution_backward", "aten::convolution_backward_overrideable",
)
