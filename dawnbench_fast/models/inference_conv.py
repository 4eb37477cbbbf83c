"""A convolution for inference on the CPU whose weight oneDNN reorders once,
not at every call, with the activation after it fused into oneDNN's call.

``F.conv2d`` hands oneDNN the weight in PyTorch's layout, and oneDNN reorders
it into its blocked layout at every call. At one image a call (the one-image
latency) that reorder costs more than the 256-channel convs' arithmetic:
measured on Zen 4 (2 threads, bf16, channels_last), 256->256 at 7x7 took
221 us a call with ``F.conv2d`` and 136 us with the weight reordered ahead,
at 3x3 132 against 47 us; at batch 2000 the two are within 1%.
``torch.ops.mkldnn._convolution_pointwise`` takes a weight reordered ahead
by ``torch.ops.mkldnn._reorder_convolution_weight`` (what Inductor's freezing
does on the CPU) and runs oneDNN's convolution on it: the same products,
summed in the order of the kernel oneDNN picks for that layout, so equal to
``F.conv2d``'s within the dtype's rounding (in bf16 on Zen 4 with no
activation fused in, the same bits; tests/ops/test_inference_conv.py bounds
both against float64).

The activation that follows the conv (``post_act``, the vocabulary's name)
runs as oneDNN's post-op on the accumulator, before the output is rounded
to its dtype: one pass over the output fewer, and in bf16 one rounding
fewer (within bf16's rounding of float64 as the unfused pair is, and closer
to it). Measured on Zen 4 at one image's six views, bf16: 64->64 at 15x15
with SiLU 88 against 75 us, 256->256 at 7x7 158 against 150 us.

The reordered weight is made at the first call and made again whenever the
weight changes (an in-place copy, as a refold makes, or a move) or the input's
size does. Only channels_last inputs take it (the evaluation's layout, where
it was measured); an fp32 input under an autocast that computes in the
weight's dtype is cast to it first, as autocast's convolution would. Any
call it does not cover (another device or layout, autograd, autocast to
another dtype, torch.compile's tracing, a torch without the op, ``reorder``
set false) is ``F.conv2d``'s, followed by the activation's PyTorch form.
"""

from __future__ import annotations

import torch
from torch import nn

from dawnbench_fast.vocabulary import activation

_OPS = torch.ops.mkldnn
AVAILABLE = (torch.backends.mkldnn.is_available() and hasattr(_OPS, "_convolution_pointwise")
             and hasattr(_OPS, "_reorder_convolution_weight"))
_DTYPES = (torch.float32, torch.bfloat16)
# Each activation as oneDNN's post-op: its name, scalars and algorithm
# ("none": GELU's exact erf form, F.gelu's default; oneDNN's swish is SiLU).
POST_OPS: dict[str, tuple[str, list, str]] = {
    "identity": ("none", [], ""), "relu": ("relu", [], ""),
    "gelu": ("gelu", [], "none"), "silu": ("swish", [], ""),
}


class InferenceConv2d(nn.Conv2d):
    """nn.Conv2d followed by the activation ``post_act``, whose CPU forward,
    outside autograd, runs on a weight reordered once for oneDNN with the
    activation fused in (the module docstring says when)."""

    def __init__(self, *args, post_act: str = "identity", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.post_act = activation(post_act).name  # a one-line error for an unknown name
        self._packed: tuple[tuple, torch.Tensor] | None = None
        # false: every call is F.conv2d's (set by a oneDNN that cannot reorder, or by the caller)
        self.reorder = AVAILABLE and self.padding_mode == "zeros" and not isinstance(self.padding, str)

    def _covers(self, x: torch.Tensor) -> bool:
        w = self.weight
        if not self.reorder or x.device.type != "cpu" or w.device.type != "cpu":
            return False
        if not x.is_contiguous(memory_format=torch.channels_last):
            return False
        if x.dtype != w.dtype or x.dtype not in _DTYPES:
            return False
        if self.bias is not None and self.bias.dtype != w.dtype:
            return False
        if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
            return False
        if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") != x.dtype:
            return False  # autocast would compute in its own dtype: F.conv2d's cast is the result
        return not torch.compiler.is_compiling()

    def packed_weight(self, x: torch.Tensor) -> torch.Tensor | None:
        """The weight reordered for inputs shaped as ``x`` (made again when
        the weight has changed since), or None where :meth:`forward` takes
        ``F.conv2d``."""
        if not self._covers(x):
            return None
        w = self.weight
        key = (w.data_ptr(), w._version, w.dtype, tuple(x.shape[1:]))
        if self._packed is None or self._packed[0] != key:
            try:
                packed = _OPS._reorder_convolution_weight(w.detach(), list(self.padding), list(self.stride),
                                                          list(self.dilation), self.groups, list(x.shape))
            except RuntimeError:  # a oneDNN build that cannot: F.conv2d from here on
                self.reorder = False
                return None
            self._packed = (key, packed)
        return self._packed[1]

    def autocast_input(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` cast to the weight's dtype where the CPU's autocast computes
        convolutions in that dtype (the rounding autocast would make), else ``x``."""
        w = self.weight
        if (x.dtype == torch.float32 and w.dtype != x.dtype and x.device.type == "cpu"
                and torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == w.dtype):
            return x.to(w.dtype)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.autocast_input(x)
        packed = self.packed_weight(x)
        if packed is None:
            return activation(self.post_act).fn(super().forward(x))
        attr, scalars, algorithm = POST_OPS[self.post_act]
        return _OPS._convolution_pointwise(x, packed, self.bias, list(self.padding), list(self.stride),
                                          list(self.dilation), self.groups, attr, scalars, algorithm)
