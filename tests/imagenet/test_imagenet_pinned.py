"""ImageNet batches bound for a GPU are built in pinned host memory (issue
28): from pageable memory ``.to(cuda, non_blocking=True)`` makes the host
wait for the copy, a synchronisation every step.

No GPU here, and pinning needs CUDA, so the loader's one allocation function
(loader.host_buffer) is replaced by one that records what it was asked and
hands out ordinary memory; the tests check that every image and label tensor
a batch carries is a buffer asked for pinned, and that without pinning
nothing changes. On a machine with CUDA the last test pins for real.
"""

from __future__ import annotations

import pytest
import torch

from dawnbench_fast import imagenet
from dawnbench_fast.data.imagenet import loader as loader_mod
from dawnbench_fast.data.imagenet.folder import ImageFolder, open_splits
from dawnbench_fast.data.imagenet.loader import ImageNetLoader
from dawnbench_fast.data.imagenet.synthetic import make_image_folder
from dawnbench_fast.imagenet import task as imagenet_task

SIZE = 24


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = make_image_folder(tmp_path_factory.mktemp("gen"), classes=3, train_per_class=5, val_per_class=3,
                             size=32)
    cut = root / "train" / "n00000001" / "n00000001_2.JPEG"
    cut.write_bytes(cut.read_bytes()[:300])  # an unreadable image: skip_bad copies the rest of its batch
    return root


@pytest.fixture
def allocations(monkeypatch):
    """Storage address -> the ``pin`` its buffer was asked with, for each buffer the loader makes."""
    asked: dict[int, bool] = {}
    alive: list[torch.Tensor] = []  # no address freed and reused by a tensor made some other way

    def host_buffer(shape, dtype, pin):
        t = torch.empty(shape, dtype=dtype)  # pinning needs CUDA: ordinary memory stands in
        asked[t.untyped_storage().data_ptr()] = pin
        alive.append(t)
        return t

    monkeypatch.setattr(loader_mod, "host_buffer", host_buffer)
    return asked


def _all_batches(source, pin: bool) -> list[tuple[torch.Tensor, ...]]:
    with ImageNetLoader(source, global_batch=4, seed=5, threads=2, skip_bad=True, pin_memory=pin) as loader:
        batches = [*loader.train_batches(0, SIZE), *loader.val_batches(SIZE, 4)]
        assert loader.bad_files  # the skip_bad path ran
    assert sorted({len(b[0]) for b in batches}) == [3, 4]  # full batches and the one missing its bad image
    return batches


@pytest.mark.parametrize("pin", [True, False])
def test_every_batch_tensor_is_a_buffer_asked_pinned_when_the_loader_pins(root, allocations, pin):
    batches = _all_batches(ImageFolder(root / "train"), pin)
    for images, labels, _ in batches:
        for t in (images, labels):
            assert allocations.get(t.untyped_storage().data_ptr()) is pin, t.shape
    assert set(allocations.values()) == {pin}  # no buffer made otherwise


def test_pinning_changes_no_pixel_or_label(root, allocations):
    source = ImageFolder(root / "train")
    for a, b in zip(_all_batches(source, True), _all_batches(source, False), strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y) and x.stride() == y.stride()


def test_the_trainer_pins_its_batches_on_cuda_only(root):
    train, val = open_splits(root)
    data = imagenet_task.ImageNetData(root, train, val)
    cfg = imagenet.Config(batch_size=4, compile="off", skip_bad=True)
    for device, pinned in ((torch.device("cuda", 0), True), (torch.device("cpu"), False)):
        task = imagenet.ImageNetTask(cfg, data, device)  # builds no tensor: no GPU needed
        assert task.loader.pin_memory is pinned and task.val_loader.pin_memory is pinned, device
        task.loader.close()
        task.val_loader.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA")
def test_on_cuda_the_batches_are_pinned_for_real(root):
    for images, labels, _ in _all_batches(ImageFolder(root / "train"), True):
        assert images.is_pinned() and labels.is_pinned()
