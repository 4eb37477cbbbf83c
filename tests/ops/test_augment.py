"""augment: every backend (the reference, torch, the cpu backend's C++ build,
the numba kernel, Triton in the interpreter, CUDA where present) equals a
plain NumPy reference exactly, and an image's augmentation depends only on
(seed, epoch, index). Then each backend's own cases: Triton's fp16/bf16
output, the C++ build's raw entry point and its argument checks.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import augment as csrc_augment
from dawnbench_fast.csrc import native
from dawnbench_fast.data import augment as A
from dawnbench_fast.kernels import launch_counts
from dawnbench_fast.kernels.launches import poisoned_outputs

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


def _check_against_numpy(op, images, cutout, translate, device="cpu"):
    padded = A.pad_reflect(torch.from_numpy(images), translate).to(device)
    scale, shift = (torch.from_numpy(v).to(device) for v in A.normalisation(MEAN, STD))
    idx = np.random.default_rng(1).choice(len(images), size=37, replace=False)  # odd batch
    for epoch in (0, 1, 4):
        p = A.augment_params(3, epoch, idx, translate=translate, cutout=cutout)
        with poisoned_outputs():
            got = op(padded, torch.from_numpy(idx).to(device), p, scale, shift)
        assert got.shape == (37, 3, 32, 32) and got.dtype == torch.float32
        assert got.is_contiguous(memory_format=torch.channels_last)
        want = numpy_reference(images, idx, p, translate)
        np.testing.assert_array_equal(got.permute(0, 2, 3, 1).cpu().numpy(), want)


CASES = [(0, 2), (8, 2), (12, 0), (5, 3)]


@pytest.mark.parametrize("cutout,translate", CASES)
def test_backend_equals_numpy_reference(implementation, device, cutout, translate, images):
    _check_against_numpy(implementation("augment"), images, cutout, translate, device)


@pytest.mark.parametrize("cutout,translate", CASES)
def test_numba_kernel_equals_numpy_reference(cutout, translate, images):
    """The numba kernel: registered nowhere (the C++ build serves --kernels cpu), kept checked."""
    _check_against_numpy(numba_augment, images, cutout, translate)


def _host_params(*args, **kwargs) -> SimpleNamespace:
    """augment_params' tensors as NumPy arrays, for the statistics below."""
    p = A.augment_params(*args, **kwargs)
    return SimpleNamespace(**{f: getattr(p, f).numpy() for f in ("ox", "oy", "flip", "cut_x", "cut_y")})


def test_parameters_depend_only_on_seed_epoch_index():
    idx = np.arange(5000)
    full = _host_params(11, 3, idx, cutout=6)
    # Any batching of the same images gives the same per-image parameters.
    for bs in (1, 7, 512, 4999):
        parts = [_host_params(11, 3, idx[i : i + bs], cutout=6) for i in range(0, 5000, bs)]
        for name in ("ox", "oy", "flip", "cut_x", "cut_y"):
            np.testing.assert_array_equal(np.concatenate([getattr(q, name) for q in parts]),
                                          getattr(full, name))
    other_seed = _host_params(12, 3, idx, cutout=6)
    other_epoch = _host_params(11, 5, idx, cutout=6)
    assert (other_seed.ox != full.ox).mean() > 0.5 and (other_epoch.oy != full.oy).mean() > 0.5


def test_parameter_ranges_are_uniform():
    p = _host_params(0, 2, np.arange(50000), translate=2, cutout=8)
    for arr, hi in ((p.ox, 4), (p.oy, 4), (p.cut_x, 24), (p.cut_y, 24)):
        counts = np.bincount(arr, minlength=hi + 1)
        assert arr.min() == 0 and arr.max() == hi
        assert counts.min() > 0.85 * counts.mean()
    assert abs(p.flip.mean() - 0.5) < 0.01


def test_alternating_flip():
    idx = np.arange(2000)
    flips = [_host_params(5, e, idx).flip for e in range(6)]
    assert abs(flips[0].mean() - 0.5) < 0.05  # random in epoch 0
    for e in range(1, 6):  # then each image's flip is inverted every other epoch
        np.testing.assert_array_equal(flips[e], flips[0] ^ bool(e % 2))
    assert not _host_params(5, 1, idx, flip=False).flip.any()


def test_random_flip_is_a_fresh_toss_every_epoch():
    idx = np.arange(4000)
    flips = [_host_params(5, e, idx, alternate=False).flip for e in range(4)]
    np.testing.assert_array_equal(flips[0], _host_params(5, 0, idx).flip)  # epoch 0: the same toss
    for e in range(1, 4):
        assert abs(flips[e].mean() - 0.5) < 0.05
        # independent of the previous epoch's (alternating: agreement 0 or 1)
        assert abs((flips[e] == flips[e - 1]).mean() - 0.5) < 0.05
    np.testing.assert_array_equal(flips[2], _host_params(5, 2, idx, alternate=False).flip)
    assert not _host_params(5, 1, idx, flip=False, alternate=False).flip.any()


def test_batch_size_does_not_change_the_batches(images):
    """The whole pipeline, not just the parameters: images augmented in one
    batch equal the same images augmented in many small batches."""
    op = dispatch.get_op("augment", "cpu")
    padded = A.pad_reflect(torch.from_numpy(images), 2)
    scale, shift = (torch.from_numpy(v) for v in A.normalisation(MEAN, STD))
    idx = np.random.default_rng(2).permutation(len(images))
    whole = op(padded, torch.from_numpy(idx), A.augment_params(0, 1, idx, cutout=4), scale, shift)
    pieces = []
    for i in range(0, len(idx), 17):
        part = idx[i : i + 17]
        pieces.append(op(padded, torch.from_numpy(part), A.augment_params(0, 1, part, cutout=4),
                         scale, shift))
    assert torch.equal(whole, torch.cat(pieces))


# ---------------------------------------------------------------- Triton
@pytest.fixture
def tk():
    """The Triton op module (skips where Triton is not installed)."""
    return pytest.importorskip("dawnbench_fast.kernels.augment")


@pytest.mark.parametrize("cutout", [0, 12])
@pytest.mark.parametrize("epoch", [0, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 7])
def test_triton_augment_dtypes_match_reference(tk, cutout, epoch, dtype, batch):
    rng = np.random.default_rng(epoch * 10 + cutout)
    images = rng.integers(0, 256, (11, 32, 32, 3), dtype=np.uint8)
    dev = torch.get_default_device()  # the GPU where the kernels run compiled (ops/conftest.py)
    padded = A.pad_reflect(torch.from_numpy(images), 2).to(dev)
    order = rng.permutation(11)[:batch]
    indices = torch.from_numpy(order).to(dev)
    params = A.augment_params(seed=5, epoch=epoch, indices=order, cutout=cutout)
    norm = A.normalisation((0.49, 0.48, 0.45), (0.25, 0.24, 0.26))
    scale, shift = (torch.from_numpy(a).to(dev) for a in norm)
    before = launch_counts["augment"]
    aug = tk.augment
    with poisoned_outputs():
        got = aug(padded, indices, params, scale, shift, out_dtype=dtype)
    want = A.augment_torch(padded, indices, params, scale, shift)
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


def test_triton_augment_rejects_non_uint8(tk):
    with pytest.raises(ValueError, match="uint8"):
        tk.augment(torch.zeros(2, 36, 36, 3), torch.tensor([0]),
                   A.augment_params(0, 0, np.array([0])), torch.ones(3), torch.zeros(3))


# ---------------------------------------------------------------- csrc (CPU build)
@pytest.fixture(scope="module")
def C():
    return native.load()


@pytest.mark.parametrize("cutout", [0, 8])
@pytest.mark.parametrize("batch", [1, 37])
def test_csrc_augment_is_bit_identical_to_reference(cutout, batch):
    rng = np.random.default_rng(batch + cutout)
    images = rng.integers(0, 256, size=(50, 32, 32, 3), dtype=np.uint8)
    padded = A.pad_reflect(torch.from_numpy(images), 2)
    scale, shift = (torch.from_numpy(a) for a in A.normalisation(MEAN, STD))
    for epoch in (0, 1):
        idx = torch.from_numpy(rng.choice(50, size=batch, replace=False))
        p = A.augment_params(int(rng.integers(1 << 30)), epoch, idx.numpy(), cutout=cutout)
        ref = A.augment_torch(padded, idx, p, scale, shift)
        out = csrc_augment.augment(padded, idx, p, scale, shift)
        assert out.shape == ref.shape and out.dtype == torch.float32
        assert out.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(out, ref)
        out16 = csrc_augment.augment(padded, idx, p, scale, shift, out_dtype=torch.bfloat16)
        assert torch.equal(out16, ref.to(torch.bfloat16))


def test_csrc_augment_raw_call_fills_poisoned_output_any_channel_count(C):
    """Five channels and an odd padding: the kernel takes any C."""
    rng = np.random.default_rng(5)
    padded = torch.from_numpy(rng.integers(0, 256, size=(9, 13, 15, 5), dtype=np.uint8))
    scale = torch.rand(5) + 0.1
    shift = torch.randn(5)
    b, size = 4, 11
    idx = torch.from_numpy(rng.integers(0, 9, size=b)).long()
    prm = torch.stack([torch.randint(0, 5, (b,)), torch.randint(0, 3, (b,)),
                       torch.randint(0, 2, (b,)), torch.randint(0, 8, (b,)),
                       torch.randint(0, 8, (b,))], 1).int()
    out = torch.full((b, size, size, 5), float("nan"))
    C.augment(0, padded.data_ptr(), idx.data_ptr(), prm.data_ptr(), scale.data_ptr(),
              shift.data_ptr(), out.data_ptr(), b, 13, 15, 5, size, 3)
    for k in range(b):
        ox, oy, fl, cx, cy = prm[k].tolist()
        crop = padded[idx[k], oy:oy + size, ox:ox + size].float()
        if fl:
            crop = crop.flip(1)
        ref = crop * scale + shift
        ref[cy:cy + 3, cx:cx + 3] = 0.0
        assert torch.equal(out[k], ref), k


def test_csrc_augment_rejects_offsets_outside_the_padding():
    padded = torch.zeros((2, 36, 36, 3), dtype=torch.uint8)
    p = A.augment_params(0, 0, np.array([0, 1]))
    p.ox[0] = 9
    with pytest.raises(RuntimeError, match="ox offsets must lie in 0..4"):  # checked on the device
        csrc_augment.augment(padded, torch.tensor([0, 1]), p, torch.ones(3), torch.zeros(3))


def test_csrc_augment_raw_op_rejects_bad_indices_and_params():
    padded = torch.zeros((2, 36, 36, 3), dtype=torch.uint8)
    prm = torch.zeros((2, 5), dtype=torch.int32)
    with pytest.raises(RuntimeError, match="indices outside the dataset's 0..1"):
        csrc_augment.augment_op(padded, torch.tensor([0, 2]), prm, torch.ones(3), torch.zeros(3), 32, 0,
                            torch.float32)
    with pytest.raises(ValueError, match="params must be"):
        csrc_augment.augment_op(padded, torch.tensor([0, 1]), prm[:1], torch.ones(3), torch.zeros(3), 32,
                            0, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_color_jitter_is_keyed_per_image_and_in_range(dtype):
    # hiverge's brightness/contrast jitter: (x + b_i) * c_i, b_i in [-0.14, 0.14),
    # c_i in [0.87, 1.13), keyed by (seed, epoch, index) like every parameter
    idx = np.arange(3000) * 7 + 5  # not a multiple of any batch size below
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(len(idx), 3, 5, 4, generator=gen).to(dtype).contiguous(memory_format=torch.channels_last)
    out = A.color_jitter(x.clone(), 11, 3, idx, 0.14, 0.13)
    assert out.is_contiguous(memory_format=torch.channels_last) and out.dtype == dtype
    # recover each image's c and b by least squares over its pixels (bf16 rounds each pixel)
    x32, o32 = x.float().flatten(1), out.float().flatten(1)
    xc, oc = x32 - x32.mean(1, keepdim=True), o32 - o32.mean(1, keepdim=True)
    c = (xc * oc).sum(1) / (xc * xc).sum(1)
    b = o32.mean(1) / c - x32.mean(1)
    tol = 0.05 if dtype == torch.bfloat16 else 1e-4
    assert c.min() > 0.87 - tol and c.max() < 1.13 + tol and b.abs().max() < 0.14 + tol
    assert c.std() > 0.06 and b.std() > 0.06  # spread over the range, not a constant
    # batching does not change an image's jitter; another epoch or seed does
    parts = [A.color_jitter(x[i : i + 512].clone(), 11, 3, idx[i : i + 512], 0.14, 0.13)
             for i in range(0, len(idx), 512)]
    torch.testing.assert_close(torch.cat(parts), out, rtol=0, atol=0)
    assert (A.color_jitter(x.clone(), 11, 4, idx, 0.14, 0.13) != out).float().mean() > 0.9
    assert (A.color_jitter(x.clone(), 12, 3, idx, 0.14, 0.13) != out).float().mean() > 0.9
    torch.testing.assert_close(A.color_jitter(x.clone(), 11, 3, idx, 0.0, 0.0), x, rtol=0, atol=0)


@pytest.mark.parametrize("shape,pad", [((3, 5, 7, 3), 1), ((2, 3, 9, 1), 2), ((4, 11, 4, 2), 3),
                                       ((1, 6, 6, 3), 5)])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_pad_reflect_equals_numpy_reflect_on_odd_shapes(shape, pad, dtype):
    gen = torch.Generator().manual_seed(sum(shape) + pad)
    x = (torch.rand(shape, generator=gen) * 255).to(dtype)
    want = np.pad(x.numpy(), ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="reflect")
    np.testing.assert_array_equal(A.pad_reflect(x, pad).numpy(), want)
