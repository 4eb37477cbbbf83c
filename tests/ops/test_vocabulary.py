"""The shared vocabulary is the one home of activation codes and dtype sizes:
the C++ enums that our CUDA/CPU kernels switch on must agree with it, and every
table derived from it must say the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from dawnbench_fast.vocabulary import ACTIVATIONS, MODEL_ACTIVATIONS, activation, itemsize

CSRC = Path(__file__).resolve().parents[2] / "csrc"


def _enum(name: str) -> dict[str, int]:
    text = (CSRC / "dbf_common.cuh").read_text()
    body = re.search(rf"enum {name} \{{([^}}]*)\}}", text)
    assert body, f"enum {name} not found in csrc/dbf_common.cuh"
    return {k.strip(): int(v) for k, v in (item.split("=") for item in body.group(1).split(","))}


def test_csrc_activation_enum_matches_the_vocabulary():
    enum = _enum("Act")
    # kGelu -> gelu
    assert {k[1:].lower(): v for k, v in enum.items()} == {a.name: a.code for a in ACTIVATIONS.values()}


def test_csrc_dtype_enum_matches_the_bindings():
    from dawnbench_fast.csrc.engine import DTYPE_CODES

    enum = _enum("DType")
    assert enum == {"kF32": DTYPE_CODES[torch.float32], "kBF16": DTYPE_CODES[torch.bfloat16],
                    "kF16": DTYPE_CODES[torch.float16]}


@pytest.mark.parametrize("name", MODEL_ACTIVATIONS)
def test_reference_functions_and_codes(name):
    act = activation(name)
    x = torch.randn(257, dtype=torch.float64)
    assert torch.equal(act.fn(x), getattr(torch.nn.functional, name)(x))
    assert act.flops > 0 and act.grad_flops > 0
    assert len({a.code for a in ACTIVATIONS.values()}) == len(ACTIVATIONS)


def test_unknown_activation_is_a_one_line_error():
    with pytest.raises(ValueError, match="unknown activation 'tanh'; choose one of") as e:
        activation("tanh")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.uint8, torch.int64])
def test_itemsize_agrees_with_torch(dtype):
    assert itemsize(dtype) == torch.empty(0, dtype=dtype).element_size()
    # the profiler's names for the same dtypes
    names = {torch.float32: "float", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
             torch.uint8: "unsigned char", torch.int64: "long int"}
    assert itemsize(names[dtype]) == itemsize(dtype)
