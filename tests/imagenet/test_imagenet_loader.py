"""The ImageNet loader (data/imagenet/loader.py) on a generated ImageFolder
and the real sample: batch shapes and layout, the epoch plan over ranks,
images identical whatever the number of ranks, threads or batch, the
validation shards, and unreadable files."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.imagenet_sample import sample_tree

from dawnbench_fast.data.imagenet import crop
from dawnbench_fast.data.imagenet.errors import BadImage
from dawnbench_fast.data.imagenet.folder import ImageFolder, open_splits
from dawnbench_fast.data.imagenet.jpeg import decode, open_image
from dawnbench_fast.data.imagenet.loader import ImageNetLoader
from dawnbench_fast.data.imagenet.pack import PackedSource, pack
from dawnbench_fast.data.imagenet.resize import resize_into
from dawnbench_fast.data.imagenet.synthetic import make_image_folder

SIZE = 48


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    root = make_image_folder(tmp_path_factory.mktemp("gen"), classes=4, train_per_class=9, val_per_class=3,
                             size=64)
    return open_splits(root)


def _epoch(loader, epoch=0, size=SIZE):
    return list(loader.train_batches(epoch, size))


def test_train_batches_shape_layout_and_plan(splits):
    train, _ = splits
    with ImageNetLoader(train, global_batch=8, seed=3, threads=2) as loader:
        batches = _epoch(loader)
        assert loader.steps_per_epoch == len(batches) == 36 // 8
        seen = torch.cat([idx for _, _, idx in batches])
        assert len(set(seen.tolist())) == 32  # one epoch: no image twice, the last partial batch dropped
        for images, labels, indices in batches:
            assert images.shape == (8, 3, SIZE, SIZE) and images.dtype == torch.uint8
            assert images.is_contiguous(memory_format=torch.channels_last)
            assert labels.dtype == indices.dtype == torch.int64
            assert torch.equal(labels, train.labels[indices])
        assert not torch.equal(seen, torch.cat([i for _, _, i in _epoch(loader, 1)]))  # a new order


def test_each_image_is_its_keyed_crop(splits):
    train, _ = splits
    with ImageNetLoader(train, global_batch=4, seed=11, threads=2) as loader:
        images, _, indices = next(iter(loader.train_batches(2, SIZE)))
    u = crop.keyed_uniforms(11, 2, indices.numpy())
    for j, i in enumerate(indices.tolist()):
        img = open_image(train.read(i), train.name(i))
        box, flip = crop.train_box(*img.size, u[j])
        pixels, s = decode(img, train.name(i), 1)  # generated images are small: no draft here
        out = np.full((SIZE, SIZE, 3), 77, np.uint8)
        resize_into(pixels, out, box.x0, box.y0, box.x1, box.y1, *box.clip, flip)
        assert np.array_equal(images[j].permute(1, 2, 0).numpy(), out)


def test_ranks_together_make_the_single_process_batch(splits):
    train, _ = splits
    with ImageNetLoader(train, global_batch=8, seed=5, threads=1) as one:
        whole = _epoch(one, 1)
    per_rank = []
    for rank in range(2):
        with ImageNetLoader(train, global_batch=8, seed=5, rank=rank, world_size=2, threads=2) as loader:
            assert loader.local_batch == 4
            per_rank.append(_epoch(loader, 1))
    for step, (images, labels, indices) in enumerate(whole):
        parts = [per_rank[r][step] for r in range(2)]
        assert torch.equal(torch.cat([p[2] for p in parts]), indices)  # contiguous shares, in rank order
        assert torch.equal(torch.cat([p[1] for p in parts]), labels)
        assert torch.equal(torch.cat([p[0] for p in parts]), images)  # every pixel


def test_val_batches_cover_each_shard_once(splits):
    _, val = splits
    shards = []
    for rank in range(3):
        with ImageNetLoader(val, global_batch=3, seed=0, rank=rank, world_size=3, threads=2) as loader:
            batches = list(loader.val_batches(SIZE, 3))
            assert [len(b[2]) for b in batches] == [3, 1]  # 4 images per shard, the last batch kept
            shards.append(torch.cat([b[2] for b in batches]))
            assert all(b[0].is_contiguous(memory_format=torch.channels_last) for b in batches)
    assert torch.cat(shards).tolist() == list(range(len(val)))  # contiguous shards, in order
    with ImageNetLoader(val, global_batch=1, seed=0) as loader:
        first = [b[0] for b in loader.val_batches(SIZE, 5)]
        assert torch.equal(torch.cat(first), torch.cat([b[0] for b in loader.val_batches(SIZE, 12)]))


def test_real_sample_through_the_loader_folder_and_packed(tmp_path):
    train, val = open_splits(sample_tree(tmp_path / "tree"))
    pack(train, tmp_path / "train.pack", threads=2)
    packed = PackedSource(tmp_path / "train.pack")
    with ImageNetLoader(train, global_batch=50, seed=0, threads=2) as a, \
            ImageNetLoader(packed, global_batch=50, seed=0, threads=2) as b:
        for (xa, ya, ia), (xb, yb, ib) in zip(a.train_batches(0, 96), b.train_batches(0, 96), strict=True):
            assert torch.equal(ia, ib) and torch.equal(ya, yb) and xa.shape == xb.shape == (50, 3, 96, 96)
            # the packed images are smaller copies: the same scene, softer
            assert (xa.float() - xb.float()).abs().mean() < 12
        batches = list(a.val_batches(128, 64))
        assert [len(x[2]) for x in batches] == [64, 36] and batches[0][0].float().std() > 20


def test_errors_and_bad_files(splits, tmp_path):
    train, _ = splits
    with pytest.raises(ValueError, match="not a positive multiple of world_size 3"):
        ImageNetLoader(train, global_batch=8, seed=0, world_size=3)
    with pytest.raises(ValueError, match="rank 2 of world_size 2"):
        ImageNetLoader(train, global_batch=8, seed=0, rank=2, world_size=2)
    with pytest.raises(ValueError, match="larger than the 36 images"):
        ImageNetLoader(train, global_batch=64, seed=0)
    with ImageNetLoader(train, global_batch=4, seed=0) as loader, pytest.raises(ValueError, match="size 0"):
        loader.train_batches(0, 0)  # at the call, before any batch
    root = make_image_folder(tmp_path, classes=2, train_per_class=4, val_per_class=1, size=32)
    cut = root / "train" / "n00000000" / "n00000000_1.JPEG"
    cut.write_bytes(cut.read_bytes()[:300])  # truncated
    text = root / "train" / "n00000001" / "readme.jpg"
    text.write_text("not an image")
    source = ImageFolder(root / "train")
    with ImageNetLoader(source, global_batch=9, seed=0, threads=2) as loader, pytest.raises(BadImage) as err:
        list(loader.val_batches(SIZE, 9))
    assert str(err.value).startswith(str(root / "train")) and "\n" not in str(err.value)
    with ImageNetLoader(source, global_batch=9, seed=0, threads=2, skip_bad=True) as loader:
        (images, labels, indices), = _epoch(loader)
        assert len(indices) == len(labels) == images.shape[0] == 7
        assert sorted(loader.bad_files) == sorted([str(cut), str(text)])
        left_out = set(range(len(source))) - set(indices.tolist())
        assert sorted(source.name(i) for i in left_out) == sorted(loader.bad_files)


def test_stopping_early_leaves_no_work_running(splits):
    train, _ = splits
    loader = ImageNetLoader(train, global_batch=4, seed=0, threads=2)
    it = loader.train_batches(0, SIZE)
    next(it)
    it.close()  # the prefetched batch is cancelled or finished, not left running
    assert next(iter(loader.train_batches(0, SIZE)))[0].shape[0] == 4
    loader.close()
