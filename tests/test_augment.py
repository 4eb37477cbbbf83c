"""Augmentation: every backend equals a plain NumPy reference exactly, and an
image's augmentation depends only on (seed, epoch, index)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.data import augment as A

MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)


def numpy_reference(images: np.ndarray, indices, p: A.AugmentParams, pad: int) -> np.ndarray:
    """Per-image loop with NumPy slicing: the specification, NHWC float32."""
    scale, shift = A.normalisation(MEAN, STD)
    out = []
    for k, i in enumerate(indices):
        img = np.pad(images[i], ((pad, pad), (pad, pad), (0, 0)), mode="reflect")
        crop = img[p.oy[k] : p.oy[k] + 32, p.ox[k] : p.ox[k] + 32]
        if p.flip[k]:
            crop = crop[:, ::-1]
        x = crop.astype(np.float32) * scale + shift
        if p.cutout:
            x[p.cut_y[k] : p.cut_y[k] + p.cutout, p.cut_x[k] : p.cut_x[k] + p.cutout] = 0.0
        out.append(x)
    return np.stack(out)


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(7).integers(0, 256, size=(300, 32, 32, 3), dtype=np.uint8)


def numba_augment(*args, **kwargs):
    from dawnbench_fast.data.augment_cpu import augment_cpu

    return augment_cpu(*args, **kwargs)


# The reference op, the numba kernel, and whatever the cpu backend serves today.
IMPLS = {"torch": lambda: dispatch.get_op("augment", "torch"), "numba": lambda: numba_augment,
         "cpu-backend": lambda: dispatch.get_op("augment", "cpu")}


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("cutout,translate", [(0, 2), (8, 2), (12, 0), (5, 3)])
def test_backend_equals_numpy_reference(impl, cutout, translate, images):
    op = IMPLS[impl]()
    padded = torch.from_numpy(A.pad_reflect(images, translate))
    scale, shift = (torch.from_numpy(v) for v in A.normalisation(MEAN, STD))
    idx = np.random.default_rng(1).choice(len(images), size=37, replace=False)  # odd batch
    for epoch in (0, 1, 4):
        p = A.augment_params(3, epoch, idx, translate=translate, cutout=cutout)
        got = op(padded, torch.from_numpy(idx), p, scale, shift)
        assert got.shape == (37, 3, 32, 32) and got.dtype == torch.float32
        assert got.is_contiguous(memory_format=torch.channels_last)
        want = numpy_reference(images, idx, p, translate)
        np.testing.assert_array_equal(got.permute(0, 2, 3, 1).numpy(), want)


def test_parameters_depend_only_on_seed_epoch_index():
    idx = np.arange(5000)
    full = A.augment_params(11, 3, idx, cutout=6)
    # Any batching of the same images gives the same per-image parameters.
    for bs in (1, 7, 512, 4999):
        parts = [A.augment_params(11, 3, idx[i : i + bs], cutout=6) for i in range(0, 5000, bs)]
        for name in ("ox", "oy", "flip", "cut_x", "cut_y"):
            np.testing.assert_array_equal(np.concatenate([getattr(q, name) for q in parts]),
                                          getattr(full, name))
    other_seed = A.augment_params(12, 3, idx, cutout=6)
    other_epoch = A.augment_params(11, 5, idx, cutout=6)
    assert (other_seed.ox != full.ox).mean() > 0.5 and (other_epoch.oy != full.oy).mean() > 0.5


def test_parameter_ranges_are_uniform():
    p = A.augment_params(0, 2, np.arange(50000), translate=2, cutout=8)
    for arr, hi in ((p.ox, 4), (p.oy, 4), (p.cut_x, 24), (p.cut_y, 24)):
        counts = np.bincount(arr, minlength=hi + 1)
        assert arr.min() == 0 and arr.max() == hi
        assert counts.min() > 0.85 * counts.mean()
    assert abs(p.flip.mean() - 0.5) < 0.01


def test_alternating_flip():
    idx = np.arange(2000)
    flips = [A.augment_params(5, e, idx).flip for e in range(6)]
    assert abs(flips[0].mean() - 0.5) < 0.05  # random in epoch 0
    for e in range(1, 6):  # then each image's flip is inverted every other epoch
        np.testing.assert_array_equal(flips[e], flips[0] ^ bool(e % 2))
    assert not A.augment_params(5, 1, idx, flip=False).flip.any()


def test_batch_size_does_not_change_the_batches(images):
    """The whole pipeline, not just the parameters: images augmented in one
    batch equal the same images augmented in many small batches."""
    op = dispatch.get_op("augment", "cpu")
    padded = torch.from_numpy(A.pad_reflect(images, 2))
    scale, shift = (torch.from_numpy(v) for v in A.normalisation(MEAN, STD))
    idx = np.random.default_rng(2).permutation(len(images))
    whole = op(padded, torch.from_numpy(idx), A.augment_params(0, 1, idx, cutout=4), scale, shift)
    pieces = []
    for i in range(0, len(idx), 17):
        part = idx[i : i + 17]
        pieces.append(op(padded, torch.from_numpy(part), A.augment_params(0, 1, part, cutout=4),
                         scale, shift))
    assert torch.equal(whole, torch.cat(pieces))
