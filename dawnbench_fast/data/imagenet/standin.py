"""TEMPORARY stand-in for the ImageNet pipeline, deleted when the pipeline's
branch (``folder.py``, ``pack.py``, ``loader.py`` in this package) is merged.

It implements only the interface the trainer codes against, plainly (PIL,
a thread pool), so that dawnbench_fast.imagenet and its tests run before
the real pipeline lands. Nothing else may import it: dawnbench_fast.imagenet
names it in one place (``open_split`` and ``make_loader``), which the merge
switches to the real modules.

- :class:`FolderSource`: ``root/<split>/<synset>/<image>``, with ``len``,
  ``labels`` (int64), ``classes`` (sorted synsets), ``read(i) -> bytes``,
  ``name(i) -> str``.
- :class:`ImageNetLoader`: ``train_batches(epoch, size)`` yields (images
  uint8 (b, 3, size, size) channels_last, labels int64, indices int64) for
  this rank: random-resized crops (scale 0.08-1, aspect 3/4-4/3) and a
  horizontal flip, keyed by (seed, epoch, index); the epoch's order is a
  permutation keyed by (seed, epoch), cut into global batches (the last
  partial one dropped), rank r taking the r-th contiguous share of each.
  ``val_batches(size, batch)`` yields centre crops (224/256 of the shorter
  side, resized to ``size``) of this rank's contiguous shard, in order.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # images, labels, global indices
EXTENSIONS = {".jpeg", ".jpg", ".png"}
VAL_CROP_RATIO = 224 / 256


class FolderSource:
    """The images of one ImageFolder split (``root`` = ``<data dir>/<split>``)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.classes = sorted(d.name for d in self.root.iterdir() if d.is_dir())
        self.paths: list[Path] = []
        labels: list[int] = []
        for c, synset in enumerate(self.classes):
            files = sorted(p for p in (self.root / synset).iterdir() if p.suffix.lower() in EXTENSIONS)
            self.paths += files
            labels += [c] * len(files)
        self.labels = torch.tensor(labels, dtype=torch.int64)

    def __len__(self) -> int:
        return len(self.paths)

    def read(self, i: int) -> bytes:
        return self.paths[i].read_bytes()

    def name(self, i: int) -> str:
        return str(self.paths[i].relative_to(self.root))


def _random_resized_crop(img: Image.Image, size: int, rng: np.random.Generator) -> Image.Image:
    w, h = img.size
    for _ in range(10):
        area = w * h * rng.uniform(0.08, 1.0)
        aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        cw, ch = round(np.sqrt(area * aspect)), round(np.sqrt(area / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            break
    else:  # the centre square
        cw = ch = min(w, h)
        x0, y0 = (w - cw) // 2, (h - ch) // 2
    out = img.resize((size, size), Image.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
    return out.transpose(Image.FLIP_LEFT_RIGHT) if rng.random() < 0.5 else out


def _centre_crop(img: Image.Image, size: int) -> Image.Image:
    w, h = img.size
    side = VAL_CROP_RATIO * min(w, h)
    x0, y0 = (w - side) / 2, (h - side) / 2
    return img.resize((size, size), Image.BILINEAR, box=(x0, y0, x0 + side, y0 + side))


class ImageNetLoader:
    """Batches of one source for one rank (the interface of loader.py)."""

    def __init__(self, source: FolderSource, *, global_batch: int, seed: int, rank: int = 0,
                 world_size: int = 1, threads: int | None = None, skip_bad: bool = False):
        if global_batch % world_size:
            raise ValueError(f"global batch {global_batch} does not divide by {world_size} ranks")
        self.source, self.global_batch, self.seed = source, global_batch, seed
        self.rank, self.world_size, self.threads = rank, world_size, threads or 4
        self.steps_per_epoch = len(source) // global_batch

    def _decode(self, i: int) -> Image.Image:
        return Image.open(io.BytesIO(self.source.read(i))).convert("RGB")

    def _batch(self, indices: np.ndarray, make) -> Batch:
        with ThreadPoolExecutor(self.threads) as pool:
            arrays = list(pool.map(make, indices.tolist()))
        images = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2)  # NHWC memory: channels_last
        idx = torch.from_numpy(indices.astype(np.int64))
        return images, self.source.labels[idx], idx

    def train_batches(self, epoch: int, size: int) -> Iterator[Batch]:
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.source))
        per = self.global_batch // self.world_size

        def make(i: int) -> np.ndarray:
            rng = np.random.default_rng([self.seed, epoch, i, 1])
            return np.asarray(_random_resized_crop(self._decode(i), size, rng))

        for k in range(self.steps_per_epoch):
            start = k * self.global_batch + self.rank * per
            yield self._batch(order[start:start + per], make)

    def val_batches(self, size: int, batch: int) -> Iterator[Batch]:
        base, extra = divmod(len(self.source), self.world_size)
        start = self.rank * base + min(self.rank, extra)
        shard = np.arange(start, start + base + (self.rank < extra))
        for k in range(0, len(shard), batch):
            yield self._batch(shard[k:k + batch], lambda i: np.asarray(_centre_crop(self._decode(i), size)))
