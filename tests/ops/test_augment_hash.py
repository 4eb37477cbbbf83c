"""The augmentation's keyed hash on the device (data/augment.py) against the
host's NumPy uint64 computation it replaced (support/keyed_hash_numpy.py), bit
for bit: the 64-bit patterns of every stream, the parameters drawn from them,
the colour jitter's factors, on fresh random keys and odd batch sizes; the
crop window's offsets re-keyed onto the same hash; and the pieces compiled as
one graph (no graph break: nothing leaves the device)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support import keyed_hash_numpy as ref

from dawnbench_fast.data import augment as A
from dawnbench_fast.data.progressive import STREAM_CROP, keyed_crop


def _keys(seed: int, n: int) -> list[tuple[int, int]]:
    """(seed, epoch) pairs: small ones as runs use, large ones whose key products wrap."""
    rng = np.random.default_rng(seed)
    large = [(int(rng.integers(0, 1 << 62)), int(rng.integers(0, 1 << 20))) for _ in range(n)]
    return [(0, 0), (1, 3), *large]


@pytest.mark.parametrize("batch", [1, 7, 1001])
@pytest.mark.parametrize("stream", [A.STREAM_FLIP, A.STREAM_TRANSLATE, A.STREAM_CUTOUT, A.STREAM_JITTER, 7])
def test_keyed_bits_match_the_host_hash(batch, stream):
    rng = np.random.default_rng(batch * 10 + stream)
    for seed, epoch in _keys(batch + stream, 3):
        idx = rng.integers(0, 1 << 40, size=batch)  # indices past 2**32 too: every bit of the product counts
        got = A.keyed_bits(seed, epoch, torch.from_numpy(idx), stream)
        assert got.dtype == torch.int64 and got.shape == (batch,)
        np.testing.assert_array_equal(got.numpy().view(np.uint64), ref.keyed_bits(seed, epoch, idx, stream))


def test_unsigned_helpers_against_python_integers():
    rng = np.random.default_rng(4)
    x = rng.integers(0, 1 << 64, size=999, dtype=np.uint64)
    x[:4] = [0, 1, (1 << 63), (1 << 64) - 1]  # the edges of the sign bit
    t = torch.from_numpy(x.view(np.int64))
    for k in (1, 16, 30, 31, 40, 63):
        np.testing.assert_array_equal(A.shr(t, k).numpy().view(np.uint64), x >> np.uint64(k))
    for m in (1, 5, 9, 25, 33, (1 << 31) - 1):
        np.testing.assert_array_equal(A.umod(t, m).numpy(), (x % np.uint64(m)).astype(np.int64))


@pytest.mark.parametrize("translate,cutout", [(2, 0), (0, 0), (4, 8), (1, 5)])
@pytest.mark.parametrize("alternate", [True, False])
def test_augment_params_match_the_host_ones(translate, cutout, alternate):
    rng = np.random.default_rng(translate * 100 + cutout + alternate)
    for seed, epoch in _keys(cutout + translate, 2):
        idx = rng.permutation(50_000)[: int(rng.integers(1, 700))]  # an odd-sized batch of an epoch's order
        for flip in (True, False):
            got = A.augment_params(seed, epoch, torch.from_numpy(idx), translate, flip, cutout,
                                   alternate=alternate)
            want = ref.augment_params(seed, epoch, idx, translate, flip, cutout, alternate=alternate)
            for name, w in want.items():
                g = getattr(got, name)
                assert g.dtype == (torch.bool if name == "flip" else torch.int32), name
                np.testing.assert_array_equal(g.numpy(), w, err_msg=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_color_jitter_factors_match_the_host_ones(dtype):
    rng = np.random.default_rng(8)
    idx = rng.integers(0, 50_000, size=333)
    x = torch.randn(333, 3, 5, 7, generator=torch.Generator().manual_seed(8)).to(dtype)
    for seed, epoch in _keys(8, 2):
        b, c = ref.jitter_factors(seed, epoch, idx, 0.14, 0.13)
        b, c = (torch.from_numpy(f).to(dtype).view(-1, 1, 1, 1) for f in (b, c))
        want = (x + b) * c
        got = A.color_jitter(x.clone(), seed, epoch, torch.from_numpy(idx), 0.14, 0.13)
        assert torch.equal(got, want)


@pytest.mark.parametrize("side", [20, 27, 31])
def test_crop_window_is_keyed_on_the_hash(side):
    gen = torch.Generator().manual_seed(side)
    x = torch.randn(5, 3, 32, 32, generator=gen).contiguous(memory_format=torch.channels_last)
    span = 33 - side
    for seed, epoch in _keys(side, 2):
        for step in (0, 3, 71):
            bits = ref.keyed_bits(seed, epoch, np.array([step]), STREAM_CROP)[0]
            oy, ox = int(bits % np.uint64(span)), int((bits >> np.uint64(32)) % np.uint64(span))
            got = keyed_crop(x, side, seed, epoch, step)
            assert got.is_contiguous(memory_format=torch.channels_last)
            assert torch.equal(got, x[..., oy:oy + side, ox:ox + side])
            # the step counter's tensor gives the same window
            assert torch.equal(keyed_crop(x, side, seed, epoch, torch.tensor(step)), got)
            assert torch.equal(keyed_crop(x, side, seed, torch.tensor(epoch), torch.tensor(step)), got)
    assert keyed_crop(x, 32, 0, 0, 0) is x


def test_augmentation_compiles_as_one_graph():
    """augment_params, the reference gather, the jitter and both ways of making
    a smaller image under ``fullgraph=True``: a host read would break the graph
    and fail here."""
    from dawnbench_fast.data.progressive import at_side

    rng = np.random.default_rng(2)
    padded = A.pad_reflect(torch.from_numpy(rng.integers(0, 256, size=(40, 32, 32, 3), dtype=np.uint8)), 2)
    scale, shift = (torch.from_numpy(a) for a in A.normalisation((0.5, 0.4, 0.45), (0.25, 0.24, 0.26)))

    def batch(idx: torch.Tensor, step: torch.Tensor, mode: str) -> torch.Tensor:
        p = A.augment_params(9, 3, idx, 2, True, 6)
        x = A.augment_torch(padded, idx, p, scale, shift)
        x = A.color_jitter(x, 9, 3, idx, 0.14, 0.13)
        return at_side(x, 24, mode, 9, 3, step)

    idx = torch.from_numpy(rng.permutation(40)[:13])
    for mode in ("crop", "downsample"):
        compiled = torch.compile(batch, fullgraph=True, backend="eager", dynamic=False)
        assert torch.equal(compiled(idx, torch.tensor(5), mode), batch(idx, torch.tensor(5), mode))


@pytest.mark.parametrize("alternate", [True, False])
def test_the_epoch_as_a_device_tensor_gives_the_same_bits_and_one_graph(alternate):
    """For a step captured once and replayed across epochs the
    epoch comes in as an int64 tensor: every stream's bits, the flips (odd
    epochs inverted on the device) and the jitter are the int epoch's, and a
    compiled batch traces one graph for every epoch."""
    rng = np.random.default_rng(7)
    idx = torch.from_numpy(rng.permutation(50_000)[:37])
    for epoch in (0, 1, 2, 7, 2**40 + 3):
        e = torch.tensor(epoch)
        for stream in range(4):
            assert torch.equal(A.keyed_bits(11, e, idx, stream), A.keyed_bits(11, epoch, idx, stream))
        a, b = A.augment_params(11, e, idx, 2, True, 8, alternate=alternate), \
            A.augment_params(11, epoch, idx, 2, True, 8, alternate=alternate)
        for field in ("ox", "oy", "flip", "cut_x", "cut_y"):
            assert torch.equal(getattr(a, field), getattr(b, field)), (epoch, field)
        x = torch.randn(37, 3, 8, 8)
        assert torch.equal(A.color_jitter(x.clone(), 11, e, idx, 0.2, 0.1),
                           A.color_jitter(x.clone(), 11, epoch, idx, 0.2, 0.1))
    flips = [A.augment_params(11, torch.tensor(k), idx, alternate=alternate).flip for k in (0, 1)]
    assert torch.equal(flips[1], ~flips[0]) == alternate and flips[0].any() and not flips[0].all()

    graphs = []

    def count(gm, _inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(lambda e: A.augment_params(11, e, idx, 2, True, 8, alternate=alternate).flip,
                             fullgraph=True, backend=count, dynamic=False)
    for epoch in range(4):
        assert torch.equal(compiled(torch.tensor(epoch)), A.augment_params(11, epoch, idx, 2, True, 8,
                                                                           alternate=alternate).flip)
    assert len(graphs) == 1


def test_the_seed_as_a_device_tensor_gives_the_same_bits_and_one_graph():
    """One captured step serves every seed of a run: with the
    seed an int64 tensor too (and the epoch an int or a tensor), every
    stream's bits, the parameters, the jitter and a keyed crop are the int
    seed's, and one compiled graph serves every seed."""
    from dawnbench_fast.data.progressive import keyed_crop

    rng = np.random.default_rng(9)
    idx = torch.from_numpy(rng.permutation(50_000)[:29])
    x = torch.randn(29, 3, 12, 12)
    for seed in (0, 1, 5, 2**45 + 17):
        s = torch.tensor(seed)
        for epoch in (0, 3, torch.tensor(3)):
            for stream in range(4):
                assert torch.equal(A.keyed_bits(s, epoch, idx, stream),
                                   A.keyed_bits(seed, int(epoch), idx, stream))
            a = A.augment_params(s, epoch, idx, 2, True, 6)
            b = A.augment_params(seed, int(epoch), idx, 2, True, 6)
            for field in ("ox", "oy", "flip", "cut_x", "cut_y"):
                assert torch.equal(getattr(a, field), getattr(b, field)), (seed, epoch, field)
            assert torch.equal(A.color_jitter(x.clone(), s, epoch, idx, 0.2, 0.1),
                               A.color_jitter(x.clone(), seed, int(epoch), idx, 0.2, 0.1))
            assert torch.equal(keyed_crop(x, 9, s, epoch, torch.tensor(4)),
                               keyed_crop(x, 9, seed, int(epoch), 4))
    # two seeds differ (the tensor seed is not ignored)
    assert not torch.equal(A.keyed_bits(torch.tensor(1), 0, idx, 1), A.keyed_bits(torch.tensor(2), 0, idx, 1))

    graphs = []

    def count(gm, _inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(lambda s, e: A.augment_params(s, e, idx, 2, True, 8).ox, fullgraph=True,
                             backend=count, dynamic=False)
    for seed in range(3):
        assert torch.equal(compiled(torch.tensor(seed), torch.tensor(1)),
                           A.augment_params(seed, 1, idx, 2, True, 8).ox)
    assert len(graphs) == 1
