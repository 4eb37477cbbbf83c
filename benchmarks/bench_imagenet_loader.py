"""The ImageNet loader's decode + random-resized crop + flip against a plain
PIL + torch baseline, per core, on real JPEGs (pytest-benchmark).

    python -m pytest benchmarks/bench_imagenet_loader.py [--benchmark-autosave]

- ``ours``: ``ImageNetLoader`` with one decoding thread (so the figure is
  per core): Pillow's decoder (draft mode where the crop allows), the numba
  crop + resize + flip kernel writing into the uint8 batch, one batch of
  prefetch.
- ``pil``: the baseline, one image at a time as a torchvision-style dataset
  does it: ``Image.open(...).convert("RGB")``, the same crop box (drawn from
  the same keyed numbers), ``crop`` + ``resize(BILINEAR)`` +
  ``FLIP_LEFT_RIGHT``, ``torch.from_numpy(np.array(img)).permute(2, 0, 1)``,
  then ``torch.stack`` into the batch, with torch on one thread as in a
  DataLoader worker (on a busy machine, two OpenMP threads made that
  stack of permuted views 250 times slower).
- ``loader_threads``: ours with one thread per core, for the scaling.

Both read the encoded bytes from memory (the file reads are the same for
both and not what is compared), at 160 and 224 px, on two forms of the same
images: ``jpeg`` (the files as they are) and ``packed256`` (pack.py's
one-time copy, longer side capped at 256 px). The images are the ImageNet
sample ($DAWNBENCH_IMAGENET_SAMPLE, else ``shared/data/imagenet-sample``
beside the checkout), or, without it, generated images of ImageNet's typical
size (about 500 x 375). ``BENCH_IMAGES`` images per round (default: all, at
most 100), ``BENCH_BATCH`` per batch (default 50), ``BENCH_ROUNDS`` timed
rounds (default 5) after one warm-up round. ``extra_info``: images/s, the
load average, the data used.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from knobs import REPO, env_int
from PIL import Image

from dawnbench_fast.data.imagenet import crop
from dawnbench_fast.data.imagenet.folder import ImageFolder
from dawnbench_fast.data.imagenet.loader import ImageNetLoader, default_threads
from dawnbench_fast.data.imagenet.pack import Limit, PackedSource, pack
from dawnbench_fast.data.imagenet.source import LabelledImages
from dawnbench_fast.data.imagenet.synthetic import make_image_folder

SAMPLE = Path(os.environ.get("DAWNBENCH_IMAGENET_SAMPLE")
              or REPO.parent / "shared" / "data" / "imagenet-sample")
IMAGES = env_int("BENCH_IMAGES", 100)
BATCH = env_int("BENCH_BATCH", 50)
ROUNDS = env_int("BENCH_ROUNDS", 5)
SEED = 0


class MemorySource(LabelledImages):
    """Encoded images held in memory, as an ImageSource."""

    def __init__(self, blobs: list[bytes], labels: list[int], what: str):
        self.blobs, self.what = blobs, what
        self._labels = torch.tensor(labels, dtype=torch.int64)
        self._classes = [f"c{c}" for c in range(max(labels) + 1)]

    def read(self, i: int) -> bytes:
        return self.blobs[i]

    def name(self, i: int) -> str:
        return f"{self.what}[{i}]"


def sample_split(tmp: Path, images: int) -> tuple[Path, str]:
    """(a class-folder split of ``images`` images under ``tmp``, what it is):
    the real sample's JPEGs linked in, else generated ones of ImageNet's
    typical size (about 500 x 375). The JPEG benchmark uses it too."""
    if (SAMPLE / "synset_to_index.tsv").is_file():
        split = tmp / "sample"
        for f in sorted(SAMPLE.glob("n*/*.JPEG"))[:images]:
            (split / f.parent.name).mkdir(parents=True, exist_ok=True)
            (split / f.parent.name / f.name).symlink_to(f)
        return split, f"the ImageNet sample ({SAMPLE.name})"
    make_image_folder(tmp / "gen", classes=10, train_per_class=-(-images // 10), val_per_class=0, size=440)
    return tmp / "gen" / "train", "generated images (~500x375)"


@pytest.fixture(scope="session")
def sources(tmp_path_factory) -> dict[str, MemorySource]:
    """The images as they are and packed (longer side 256), in memory."""
    tmp = tmp_path_factory.mktemp("imagenet-bench")
    split, what = sample_split(tmp, IMAGES)
    folder = ImageFolder(split)
    n = min(IMAGES, len(folder))
    pack(folder, tmp / "packed.pack", Limit(side=256), threads=default_threads())
    packed = PackedSource(tmp / "packed.pack")
    labels = folder.labels[:n].tolist()
    return {form: MemorySource([src.read(i) for i in range(n)], labels, f"{what}, {form}")
            for form, src in (("jpeg", folder), ("packed256", packed))}


def baseline_batch(source: MemorySource, indices: np.ndarray, epoch: int, size: int) -> torch.Tensor:
    """PIL decode, the same random-resized crop, resize, flip, to tensor; stacked."""
    u = crop.keyed_uniforms(SEED, epoch, indices)
    out = []
    for j, i in enumerate(indices):
        img = Image.open(io.BytesIO(source.read(int(i)))).convert("RGB")
        box, flip = crop.train_box(img.width, img.height, u[j])
        img = img.crop(box.clip).resize((size, size), Image.BILINEAR)
        if flip:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        out.append(torch.from_numpy(np.array(img)).permute(2, 0, 1))  # torchvision's pil_to_tensor copies too
    return torch.stack(out)


def _epoch_ours(loader: ImageNetLoader, size: int) -> int:
    return sum(len(idx) for _, _, idx in loader.train_batches(0, size))


def _epoch_pil(loader: ImageNetLoader, size: int) -> int:
    # the loader only plans the batches here (the same images, in the same order)
    return sum(len(baseline_batch(loader.source, idx, 0, size)) for idx in loader.rank_indices(0))


def _record(benchmark, fn, images: int, source: MemorySource, threads: int) -> None:
    load_before = os.getloadavg()[0]
    done = benchmark.pedantic(fn, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    assert done == images
    benchmark.extra_info.update(images=images, images_per_s=images / benchmark.stats.stats.median,
                                images_per_s_per_thread=images / benchmark.stats.stats.median / threads,
                                threads=threads, data=source.what, loadavg_before=load_before,
                                loadavg_after=os.getloadavg()[0])


@pytest.mark.parametrize("impl", ["pil", "ours"])
@pytest.mark.parametrize("form", ["jpeg", "packed256"])
@pytest.mark.parametrize("size", [160, 224])
def test_decode_crop_flip_per_core(benchmark, sources, impl, form, size):
    source = sources[form]
    batch = min(BATCH, len(source))
    loader = ImageNetLoader(source, global_batch=batch, seed=SEED, threads=1)
    images = loader.steps_per_epoch * batch
    benchmark.group = f"decode + crop + flip, {size} px, {form}, one core"
    run = _epoch_ours if impl == "ours" else _epoch_pil
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core, as in a DataLoader worker (torch.stack would spread otherwise)
    try:
        _record(benchmark, lambda: run(loader, size), images, source, 1)
    finally:
        torch.set_num_threads(torch_threads)
        loader.close()


@pytest.mark.parametrize("size", [160, 224])
def test_loader_threads(benchmark, sources, size):
    source = sources["jpeg"]
    batch = min(BATCH, len(source))
    threads = default_threads()
    with ImageNetLoader(source, global_batch=batch, seed=SEED, threads=threads) as loader:
        benchmark.group = f"loader, {size} px, jpeg, {threads} threads"
        _record(benchmark, lambda: _epoch_ours(loader, size), loader.steps_per_epoch * batch, source, threads)
