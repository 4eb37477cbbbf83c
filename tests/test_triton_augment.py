"""Augmentation kernel against the torch reference (data/augment.py) in the
Triton interpreter: same keyed parameters, translate, alternating flip,
cutout, normalisation, fp32/fp16/bf16 output (bf16: conversion only)."""

import numpy as np
import pytest
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.data.augment import (
    augment_params,
    augment_torch,
    normalisation,
    pad_reflect,
)
from dawnbench_fast.kernels import launch_counts
from dawnbench_fast.kernels.launches import poisoned_outputs


@pytest.mark.parametrize("cutout", [0, 12])
@pytest.mark.parametrize("epoch", [0, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 7])
def test_augment_matches_reference(cutout, epoch, dtype, batch):
    rng = np.random.default_rng(epoch * 10 + cutout)
    images = rng.integers(0, 256, (11, 32, 32, 3), dtype=np.uint8)
    padded = torch.from_numpy(pad_reflect(images, 2))
    indices = torch.from_numpy(rng.permutation(11)[:batch])
    params = augment_params(seed=5, epoch=epoch, indices=indices.numpy(), cutout=cutout)
    scale, shift = (torch.from_numpy(a) for a in normalisation((0.49, 0.48, 0.45), (0.25, 0.24, 0.26)))
    before = launch_counts["augment"]
    aug = dispatch.get_op("augment", "triton")
    with poisoned_outputs():
        got = aug(padded, indices, params, scale, shift, out_dtype=dtype)
    want = augment_torch(padded, indices, params, scale, shift)
    assert launch_counts["augment"] == before + 1
    assert got.shape == want.shape and got.dtype == dtype
    assert got.is_contiguous(memory_format=torch.channels_last)
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    elif dtype == torch.float16:
        torch.testing.assert_close(got, want.to(dtype), rtol=0, atol=0)  # one rounding
    else:  # the interpreter's fp32->bf16 conversion may differ by one bf16 ulp
        torch.testing.assert_close(got.float(), want, rtol=2**-7, atol=1e-6)
    if cutout:
        assert (got == 0).all(dim=1).sum() >= batch * cutout * cutout


def test_augment_rejects_non_uint8():
    with pytest.raises(ValueError, match="uint8"):
        dispatch.get_op("augment", "triton")(torch.zeros(2, 36, 36, 3), torch.tensor([0]),
                                             augment_params(0, 0, np.array([0])),
                                             torch.ones(3), torch.zeros(3))
