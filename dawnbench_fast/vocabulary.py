"""The words every floor of the house shares, defined once: activations,
the conv weight-gradient methods and dtype sizes.

This module is the lowest floor: it imports only torch, so the models, the
Triton and CUDA C++ kernels, the CPU kernels and the roofline's cost formulas
can all read from it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Activation:
    """One activation function, as every backend names and counts it."""

    name: str
    code: int  # the integer our Triton and CUDA C++ kernels switch on (constexpr / template)
    fn: Callable[[torch.Tensor], torch.Tensor]  # the PyTorch reference
    flops: int  # FLOPs per element of the forward (erf and exp count as one)
    grad_flops: int  # FLOPs per element of grad * derivative


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


# gelu is the exact (erf) form, as F.gelu's default: 0.5 * x * (1 + erf(x / sqrt(2)))
# is mul, erf, add, mul, mul; its derivative erf, exp and 5 arithmetic, times grad.
ACTIVATIONS: dict[str, Activation] = {
    a.name: a
    for a in (
        Activation("identity", 0, _identity, 0, 0),
        Activation("relu", 1, F.relu, 1, 1),
        Activation("gelu", 2, F.gelu, 5, 11),
        Activation("silu", 3, F.silu, 4, 7),  # x * sigmoid(x)
    )
}
# The activations a model may choose (identity is only a kernel's no-op epilogue).
MODEL_ACTIVATIONS: tuple[str, ...] = ("gelu", "relu", "silu")


# The CPU conv weight-gradient methods (csrc/conv_group.py says what each is)
# and the policies that choose among them: the recipe's ``conv_wgrad`` field
# and DAWNBENCH_WGRAD name them.
WGRAD_METHODS: tuple[str, ...] = ("aten", "fp32", "im2col", "dpbf16", "amx")
WGRAD_POLICIES: tuple[str, ...] = ("auto", "frozen", *WGRAD_METHODS)
# The data-gradient methods of a conv before a 2x2 max-pool
# (csrc/conv_group_dgrad.py): the recipe's ``conv_dgrad`` and DAWNBENCH_DGRAD.
DGRAD_METHODS: tuple[str, ...] = ("aten", "pooled", "pooled-fma")


def activation(name: str) -> Activation:
    """The activation called ``name``; a one-line error naming the choices otherwise."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}") from None


# Bytes per element, keyed by the dtype names the PyTorch profiler writes in
# "Input type" and by str(torch.dtype), so trace formulas and live tensors agree.
DTYPE_BYTES: dict[str, int] = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "long int": 8,
    "long long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::complex<c10::Half>": 4,
    **{str(dt): dt.itemsize for dt in (
        torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
        torch.int16, torch.int8, torch.uint8, torch.bool)},
}


def itemsize(dtype: object) -> int:
    """Bytes per element of a dtype name or torch.dtype; 4 (fp32) when unknown."""
    return DTYPE_BYTES.get(str(dtype), 4)
