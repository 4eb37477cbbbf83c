"""Activation functions and their derivatives as Triton device functions.

``ACT`` codes are constexpr integers (``vocabulary.Activation.code``, shared
with the CUDA C++ kernels) so that each activation compiles to its own
specialised kernel. All math is fp32.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dawnbench_fast.vocabulary import activation

# Globals read inside @triton.jit functions must be constexpr.
_INV_SQRT2 = tl.constexpr(0.7071067811865476)
_INV_SQRT_2PI = tl.constexpr(0.3989422804014327)


def act_code(act: str) -> int:
    """Integer code of an activation name; one-line error for unknown names."""
    return activation(act).code


@triton.jit
def apply_act(u, ACT: tl.constexpr):
    """act(u) for fp32 ``u``. GELU is the exact (erf) form, as F.gelu's default."""
    if ACT == 1:
        return tl.maximum(u, 0.0)
    elif ACT == 2:
        return 0.5 * u * (1.0 + tl.math.erf(u * _INV_SQRT2))
    elif ACT == 3:
        return u / (1.0 + tl.exp(-u))
    else:
        return u


@triton.jit
def act_grad(u, ACT: tl.constexpr):
    """d act(u) / du for fp32 ``u``."""
    if ACT == 1:
        return tl.where(u > 0.0, 1.0, 0.0)
    elif ACT == 2:
        cdf = 0.5 * (1.0 + tl.math.erf(u * _INV_SQRT2))
        return cdf + u * _INV_SQRT_2PI * tl.exp(-0.5 * u * u)
    elif ACT == 3:
        s = 1.0 / (1.0 + tl.exp(-u))
        return s * (1.0 + u * (1.0 - s))
    else:
        return u * 0.0 + 1.0
