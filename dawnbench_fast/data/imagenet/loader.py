"""The ImageNet loader: uint8 batches of decoded, cropped, flipped images for
one rank of a (possibly distributed) run.

Training batches. The epoch's order is a permutation of the whole set keyed
by (seed, epoch), cut into global batches of ``global_batch`` images (the
last partial one dropped); rank r of ``world_size`` takes the r-th
contiguous share of each. Each image's crop and flip are keyed by (seed,
epoch, image index) (crop.py). So a step's images, and every pixel of them,
are the same whatever the number of ranks: 1 rank at batch 512 sees what 2
ranks at 256 each see together.

Validation batches: each rank takes a contiguous shard of the set (no image
dropped, shards differ by at most one image) in order, centre crops.

Images come back as a uint8 tensor (b, 3, size, size) in channels_last
memory (NHWC storage: the layout the decoder writes and the convolutions
want), labels and global indices as int64 (b,). Normalisation is left to the
trainer, on the device, where it is fused and free. With ``pin_memory`` (a
trainer on CUDA) images and labels are built in pinned (page-locked) host
memory: PyTorch's ``.to(cuda, non_blocking=True)`` from pageable memory
stages the copy and makes the host wait for it, a synchronisation each step;
from pinned memory it is queued and the host goes on (data/host_copy.py says
the same of CIFAR's per-step host data).

Work is spread over a thread pool: Pillow releases the GIL while it decodes
and the resize kernel is compiled with ``nogil``, so threads run in parallel
with no processes to start or pickle. The next ``prefetch`` batches (two by
default) are built while the caller uses the current one: one batch ahead
left the pool idle between the moment a batch is handed out and the next
one's first image, and a step that takes longer than usual (an evaluation, a
checkpoint) is absorbed. The decoder (``decoder``) is Pillow or
libjpeg-turbo through simplejpeg (jpeg_turbo.py).

Threads: by default the cores this process may use divided by the processes
torchrun starts on this node (``LOCAL_WORLD_SIZE``): 8 ranks on a 96-core node
get 12 threads each, not 96 each (768 threads fighting for 96 cores). A
task's train and validation loaders each have a pool of that size, but never
decode at the same time (evaluation runs between epochs).
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np
import torch

from dawnbench_fast.data.imagenet import crop
from dawnbench_fast.data.imagenet.errors import BadImage
from dawnbench_fast.data.imagenet.folder import ImageFolder
from dawnbench_fast.data.imagenet.jpeg import PilDecoder, draft_scale
from dawnbench_fast.data.imagenet.jpeg_turbo import TurboDecoder, get_decoder
from dawnbench_fast.data.imagenet.pack import PackedSource
from dawnbench_fast.data.imagenet.resize import resize_into
from dawnbench_fast.data.imagenet.source import ImageSource

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
CHUNK = 8  # images per pool task: enough to hide the task overhead, small enough to balance
PREFETCH = 2  # batches built ahead of the one the caller holds


def open_source(path: str | Path, classes: list[str] | None = None) -> ImageSource:
    """A packed file (pack.py) or an ImageFolder split folder (``root/train``),
    by what ``path`` is. ``classes`` (folders only): the synset list to index
    by, e.g. the training split's for the validation split."""
    path = Path(path)
    if path.is_file():
        return PackedSource(path)
    return ImageFolder(path, classes=classes)


def default_threads() -> int:
    """The cores this process may run on, shared with the other processes
    torchrun started on this node (``LOCAL_WORLD_SIZE``; 1 outside torchrun)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:  # not set by torchrun: ignore rather than fail a loader over it
        local = 1
    return max(1, cores // local)


def host_buffer(shape: tuple[int, ...], dtype: torch.dtype, pin: bool) -> torch.Tensor:
    """An empty host tensor, pinned with ``pin`` (every buffer the loader hands
    out is made here). The caching host allocator keeps a pinned block from
    reuse until the copies queued from it have run, so a batch may be dropped
    as soon as its non-blocking copy is queued."""
    return torch.empty(shape, dtype=dtype, pin_memory=pin)


def _check_size(size: int) -> None:
    if size < 1:
        raise ValueError(f"size {size}: the output side must be a positive number of pixels")


class ImageNetLoader:
    """Batches of ``source`` for rank ``rank`` of ``world_size``.

    ``global_batch``: images per training step over all ranks (a multiple of
    ``world_size``). ``threads``: decoding threads (default:
    :func:`default_threads`). ``prefetch``: batches built ahead (>= 1).
    ``decoder``: ``"pil"`` or ``"simplejpeg"`` (jpeg_turbo.py). ``skip_bad``:
    leave unreadable images out of their batch (which is then smaller) and
    list them in ``bad_files``, instead of raising :class:`~.errors.BadImage`.
    ``pin_memory``: images and labels in pinned host memory, for asynchronous
    copies to a GPU (needs CUDA).
    """

    def __init__(self, source: ImageSource, *, global_batch: int, seed: int, rank: int = 0,
                 world_size: int = 1, threads: int | None = None, skip_bad: bool = False,
                 pin_memory: bool = False, prefetch: int = PREFETCH, decoder: str = "pil"):
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} of world_size {world_size}: need 0 <= rank < world_size")
        if global_batch < 1 or global_batch % world_size:
            raise ValueError(f"global_batch {global_batch} is not a positive multiple of world_size "
                             f"{world_size}: each rank must take the same share of a step")
        if len(source) < global_batch:
            raise ValueError(f"global_batch {global_batch} is larger than the {len(source)} images "
                             f"of the source: no full batch to train on")
        if prefetch < 1:
            raise ValueError(f"prefetch {prefetch}: must be >= 1 batch")
        self.decoder: PilDecoder | TurboDecoder = get_decoder(decoder)  # before the pool: may raise
        self.prefetch = prefetch
        self.source = source
        self.global_batch = global_batch
        self.local_batch = global_batch // world_size
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.threads = threads or default_threads()
        self.skip_bad = skip_bad
        self.pin_memory = pin_memory
        self.bad_files: list[str] = []  # with skip_bad: each unreadable file once, as found
        self._labels = source.labels.numpy()
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="imagenet-decode")

    @property
    def steps_per_epoch(self) -> int:
        """Full global batches in an epoch (the last partial one is dropped)."""
        return len(self.source) // self.global_batch

    def rank_indices(self, epoch: int) -> np.ndarray:
        """int64 (steps_per_epoch, local_batch): this rank's images, step by step."""
        perm = crop.keyed_permutation(self.seed, epoch, len(self.source))
        steps = perm[:self.steps_per_epoch * self.global_batch].reshape(self.steps_per_epoch, -1)
        return steps[:, self.rank * self.local_batch:(self.rank + 1) * self.local_batch]

    def train_batches(self, epoch: int, size: int) -> Iterator[Batch]:
        """This rank's batches of ``epoch`` at ``size`` x ``size`` px: random
        resized crops and flips keyed by (seed, epoch, index)."""
        _check_size(size)  # here, not at the first batch: a generator would defer the error
        plans = ((idx, crop.keyed_uniforms(self.seed, epoch, idx)) for idx in self.rank_indices(epoch))
        return self._pipeline(plans, size)

    def val_shard(self) -> np.ndarray:
        """int64: this rank's contiguous share of the whole set, in order."""
        n = len(self.source)
        return np.arange(self.rank * n // self.world_size, (self.rank + 1) * n // self.world_size)

    def val_batches(self, size: int, batch: int) -> Iterator[Batch]:
        """This rank's shard in batches of ``batch`` (the last may be smaller),
        centre crops at ``size`` x ``size`` px."""
        _check_size(size)
        if batch < 1:
            raise ValueError(f"batch {batch}: must be positive")
        shard = self.val_shard()
        plans = ((shard[i:i + batch], None) for i in range(0, len(shard), batch))
        return self._pipeline(plans, size)

    def _pipeline(self, plans: Iterator[tuple[np.ndarray, np.ndarray | None]], size: int) -> Iterator[Batch]:
        """Submit each batch's work, keep ``prefetch`` batches ahead, yield in order; on
        early exit, cancel what has not started and wait for what has."""
        pending: deque[tuple[np.ndarray, torch.Tensor, list[Future]]] = deque()
        try:
            for indices, uniforms in plans:
                pending.append(self._submit(indices, uniforms, size))
                if len(pending) > self.prefetch:
                    yield self._collect(*pending.popleft())
            while pending:
                yield self._collect(*pending.popleft())
        finally:
            for _, _, futures in pending:
                for f in futures:
                    f.cancel()
                for f in futures:
                    if not f.cancelled():
                        f.exception()  # wait: the batch buffer must outlive its writers

    def _submit(self, indices: np.ndarray, uniforms: np.ndarray | None,
                size: int) -> tuple[np.ndarray, torch.Tensor, list[Future]]:
        images = host_buffer((len(indices), size, size, 3), torch.uint8, self.pin_memory)
        out = images.numpy()
        futures = [self._pool.submit(self._fill, out, indices, uniforms, lo, min(lo + CHUNK, len(indices)))
                   for lo in range(0, len(indices), CHUNK)]
        return indices, images, futures

    def _collect(self, indices: np.ndarray, images: torch.Tensor, futures: list[Future]) -> Batch:
        wait(futures)  # all of them, even when one raises: the others still write into ``images``
        bad = sorted(j for f in futures for j in f.result())
        if bad:  # the kept images copied into a buffer of their own: pinned too, if asked
            keep = np.setdiff1d(np.arange(len(indices)), bad)
            kept = host_buffer((len(keep), *images.shape[1:]), images.dtype, self.pin_memory)
            indices, images = indices[keep], torch.index_select(images, 0, torch.from_numpy(keep), out=kept)
        labels = host_buffer((len(indices),), torch.int64, self.pin_memory)
        labels.numpy()[:] = self._labels[indices]
        # (b, h, w, 3) storage seen as (b, 3, h, w): channels_last, no copy
        return images.permute(0, 3, 1, 2), labels, torch.from_numpy(np.ascontiguousarray(indices))

    def _fill(self, out: np.ndarray, indices: np.ndarray, uniforms: np.ndarray | None,
              lo: int, hi: int) -> list[int]:
        """Decode and resample images ``lo .. hi`` of a batch into ``out``;
        returns the slots of unreadable images (skip_bad) or raises BadImage."""
        bad = []
        for j in range(lo, hi):
            index = int(indices[j])
            try:
                self._load_one(out[j], index, None if uniforms is None else uniforms[j])
            except BadImage as e:
                name = self.source.name(index)  # asked only now: a packed file's names are read lazily
                if not self.skip_bad:
                    raise BadImage(name, e.reason) from e
                bad.append(j)
                if name not in self.bad_files:  # list.append is atomic under the GIL
                    self.bad_files.append(name)
        return bad

    def _load_one(self, out: np.ndarray, index: int, u: np.ndarray | None) -> None:
        name = f"image {index}"  # replaced by the source's name if this image is bad
        width, height, img = self.decoder.open(self.source.read(index), name)
        if u is None:
            box, flip = crop.val_box(width, height, out.shape[0]), False
        else:
            box, flip = crop.train_box(width, height, u)
        s = draft_scale(width, height, box.x1 - box.x0, box.y1 - box.y0, out.shape[1], out.shape[0])
        pixels, s = self.decoder.decode(img, name, s)
        b = crop.scaled(box, s, pixels.shape[1], pixels.shape[0])
        resize_into(pixels, out, b.x0, b.y0, b.x1, b.y1, *b.clip, flip)

    def time_images(self, size: int, seconds: float, max_images: int | None = None,
                    epoch: int = 0) -> tuple[int, float]:
        """Decode, crop and resize this rank's training images of ``epoch``
        (cycled if need be) at ``size`` px on the loader's threads for about
        ``seconds``, or until ``max_images`` are done; returns (images done,
        seconds taken). The work goes out a
        chunk at a time, not a batch at a time, so that a slow source still
        stops near ``seconds`` (a batch of 1024 full-size JPEGs on one slow
        core can take minutes)."""
        _check_size(size)
        order = self.rank_indices(epoch).ravel()
        chunks = [order[i:i + CHUNK] for i in range(0, len(order), CHUNK)]
        if not chunks:
            return 0, 0.0
        uniforms = [crop.keyed_uniforms(self.seed, epoch, c) for c in chunks]
        done, k, start = 0, 0, time.perf_counter()
        running: dict[Future, int] = {}
        while True:
            late = time.perf_counter() - start >= seconds or (max_images is not None and done >= max_images)
            while not late and len(running) < 2 * self.threads:  # keep every thread busy
                c = chunks[k % len(chunks)]
                out = np.empty((len(c), size, size, 3), np.uint8)
                running[self._pool.submit(self._fill, out, c, uniforms[k % len(chunks)], 0, len(c))] = len(c)
                k += 1
            if not running:
                return done, time.perf_counter() - start
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                done += running.pop(f) - len(f.result())  # unreadable ones (skip_bad) not counted

    def close(self) -> None:
        """Stop the decoding threads (after the work already handed to them)."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ImageNetLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
