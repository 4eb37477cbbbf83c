"""One file per split: every image's JPEG bytes, resized once, and an index.

ImageNet's 1.28 M training files average about 110 KB and 400 x 350 px; a
training crop at 160-224 px needs far fewer pixels than that. Packing each
image once at a capped size (longer side 256 by default, re-encoded at
quality 90; images already within the cap keep their original bytes) makes
every later decode several times cheaper, and one file read through mmap
replaces a million file opens. FFCV made the same trade; the format here is
our own and small:

    header   64 bytes, little-endian: struct "<8sIIQIIIIQQQ"
             magic b"DBFIMGPK", version (1), header size (64),
             count n, classes, limit kind (0 none, 1 longer side, 2 shorter
             side), limit (px), JPEG quality, index offset, synsets bytes,
             names bytes
    data     the n images' encoded bytes, back to back
    index    (at the index offset, 8-aligned) offsets uint64[n] (from the
             file's start), labels int64[n], lengths uint32[n]
    synsets  the class list, UTF-8, one per line (label = line number)
    names    each image's origin "<synset>/<file>", UTF-8, one per line

The file is written under a temporary name beside the target and renamed
into place when complete, so a crash never leaves a half-written file under
the real name.

    python -m dawnbench_fast.data.imagenet.pack ROOT/train train.pack [--max-side 256]
    python -m dawnbench_fast.data.imagenet.pack ROOT/val val.pack --short-side 293 --classes-from ROOT/train
"""

from __future__ import annotations

import argparse
import io
import mmap
import os
import struct
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from dawnbench_fast.data.imagenet.errors import BadImage, DataError
from dawnbench_fast.data.imagenet.folder import ImageFolder
from dawnbench_fast.data.imagenet.jpeg import open_image
from dawnbench_fast.data.imagenet.source import ImageSource, LabelledImages

MAGIC = b"DBFIMGPK"
VERSION = 1
HEADER = struct.Struct("<8sIIQIIIIQQQ")  # 64 bytes
LIMIT_NONE, LIMIT_LONGER, LIMIT_SHORTER = 0, 1, 2
MAKE = "make one with python -m dawnbench_fast.data.imagenet.pack SPLIT_DIR OUT_FILE"


@dataclass(frozen=True)
class Limit:
    """How packing resizes: ``side`` caps the longer side (``kind`` LIMIT_LONGER)
    or the shorter one (LIMIT_SHORTER); images are never enlarged."""

    kind: int = LIMIT_LONGER
    side: int = 256
    quality: int = 90

    def target(self, width: int, height: int) -> tuple[int, int] | None:
        """The packed size of a ``width`` x ``height`` image, None to keep it."""
        if self.kind == LIMIT_NONE:
            return None
        ref = max(width, height) if self.kind == LIMIT_LONGER else min(width, height)
        if ref <= self.side:
            return None
        r = self.side / ref
        return max(1, round(width * r)), max(1, round(height * r))


def repack(data: bytes, name: str, limit: Limit) -> bytes:
    """One image's bytes as stored: the original if it is an RGB or
    grayscale JPEG within the limit, else resized (Pillow's draft mode to
    near the target, then its antialiased bicubic) and encoded as RGB JPEG."""
    img = open_image(data, name)
    target = limit.target(*img.size)
    if target is None and img.format == "JPEG" and img.mode in ("RGB", "L"):
        return data
    try:
        if target is not None and img.format == "JPEG":
            img.draft("RGB", target)  # DCT scaling to no less than the target: cheap and clean
        img = img.convert("RGB")
        if target is not None:
            img = img.resize(target, Image.Resampling.BICUBIC)
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=limit.quality)
    except Exception as e:  # truncated data and the like, found while decoding
        raise BadImage(name, f"{type(e).__name__}: {e}") from e
    return buf.getvalue()


def _ordered(fn: Callable[[int], bytes | None], n: int, threads: int,
             window: int = 256) -> Iterator[bytes | None]:
    """fn(0), fn(1), ... computed by a thread pool, yielded in order, with at
    most ``window`` in flight (a million futures at once would not fit)."""
    with ThreadPoolExecutor(threads) as pool:
        pending: deque = deque()
        for i in range(n):
            pending.append(pool.submit(fn, i))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _origin(name: str) -> str:
    """'<synset>/<file>' from a path (the part that identifies an ImageNet image)."""
    p = Path(name)
    return f"{p.parent.name}/{p.name}"


@dataclass
class PackStats:
    images: int
    bad: list[str]  # left out with skip_bad
    bytes: int


def _write_images(f, source: ImageSource, limit: Limit, threads: int, skip_bad: bool,
                  progress: Callable[[int], None] | None) -> tuple[list, PackStats]:
    """Stream the images into ``f``; returns their (offset, label, length, origin) and the counts."""
    labels = source.labels.numpy()

    def one(i: int) -> bytes | None:
        try:
            return repack(source.read(i), source.name(i), limit)
        except BadImage:
            if skip_bad:
                return None
            raise

    rows, bad = [], []
    for i, data in enumerate(_ordered(one, len(source), threads)):
        if data is None:
            bad.append(source.name(i))
            continue
        rows.append((f.tell(), int(labels[i]), len(data), _origin(source.name(i))))
        f.write(data)
        if progress is not None and (i + 1) % 10_000 == 0:
            progress(i + 1)
    return rows, PackStats(len(rows), bad, 0)


def pack(source: ImageSource, out_file: str | Path, limit: Limit = Limit(), *, threads: int | None = None,
         skip_bad: bool = False, progress: Callable[[int], None] | None = None) -> PackStats:
    """Write ``source`` as one packed file at ``out_file`` (atomically)."""
    out = Path(out_file)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(b"\0" * HEADER.size)
            rows, stats = _write_images(f, source, limit, threads or os.cpu_count() or 1, skip_bad, progress)
            if not rows:
                raise DataError(f"{out}: no readable image to pack ({len(stats.bad)} bad files)")
            f.write(b"\0" * (-f.tell() % 8))  # the index arrays start 8-aligned
            index_offset = f.tell()
            offsets, labels, lengths, origins = zip(*rows, strict=True)
            f.write(np.asarray(offsets, "<u8").tobytes() + np.asarray(labels, "<i8").tobytes()
                    + np.asarray(lengths, "<u4").tobytes())
            synsets = "\n".join(source.classes).encode()
            names = "\n".join(origins).encode()
            f.write(synsets + names)
            f.seek(0)
            f.write(HEADER.pack(MAGIC, VERSION, HEADER.size, len(rows), len(source.classes), limit.kind,
                                limit.side, limit.quality, index_offset, len(synsets), len(names)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    stats.bytes = out.stat().st_size
    return stats


class PackedSource(LabelledImages):
    """A packed file as an :class:`~.source.ImageSource`, read through mmap
    (random access, pages shared between processes, no file per image)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            f = open(self.path, "rb")
        except OSError as e:
            raise DataError(f"{self.path}: cannot be opened ({e.strerror or e}); {MAKE}") from e
        with f:
            head = f.read(HEADER.size)
            size = os.fstat(f.fileno()).st_size
            self._check_header(head, size)
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        n, at = self.count, self.index_offset
        self._offsets = np.frombuffer(self._mm, "<u8", n, at)
        labels = np.frombuffer(self._mm, "<i8", n, at + 8 * n)
        self._lengths = np.frombuffer(self._mm, "<u4", n, at + 16 * n)
        if n and (int((self._offsets + self._lengths).max()) > at or int(self._offsets.min()) < HEADER.size):
            raise DataError(f"{self.path}: index points outside the image data (damaged file); {MAKE}")
        start = at + 20 * n
        self._classes = self._mm[start:start + self._synsets_bytes].decode().split("\n")
        bad_labels = n and not 0 <= labels.min() <= labels.max() < self._n_classes
        if len(self._classes) != self._n_classes or bad_labels:
            raise DataError(f"{self.path}: class list and labels disagree (damaged file); {MAKE}")
        self._labels = torch.from_numpy(labels.astype(np.int64))  # a copy: the mmap is read-only
        self._names_at = start + self._synsets_bytes
        self._names: list[str] | None = None

    def _check_header(self, head: bytes, size: int) -> None:
        if len(head) < HEADER.size or head[:8] != MAGIC:
            raise DataError(f"{self.path}: not a packed image file (magic {head[:8]!r}, "
                            f"expected {MAGIC!r}); {MAKE}")
        (_, version, header_size, self.count, self._n_classes, kind, side, quality, self.index_offset,
         self._synsets_bytes, names_bytes) = HEADER.unpack(head)
        if version != VERSION or header_size != HEADER.size:
            raise DataError(f"{self.path}: format version {version}, this reader knows {VERSION}; "
                            f"pack the split again with this version")
        self.limit = Limit(kind, side, quality)
        want = self.index_offset + 20 * self.count + self._synsets_bytes + names_bytes
        if size != want:
            raise DataError(f"{self.path}: {size} bytes, the header promises {want} (truncated or "
                            f"damaged); {MAKE}")

    def read(self, i: int) -> bytes:
        off = int(self._offsets[i])
        return self._mm[off:off + int(self._lengths[i])]

    def name(self, i: int) -> str:
        if self._names is None:  # decoded on first use: error messages only
            self._names = self._mm[self._names_at:].decode().split("\n")
        return f"{self.path}[{i}] ({self._names[i]})"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m dawnbench_fast.data.imagenet.pack",
                                 description="Pack one ImageFolder split into one file of resized JPEGs.")
    ap.add_argument("src", help="the split folder, e.g. ROOT/train (holding <synset>/*.JPEG)")
    ap.add_argument("out", help="the packed file to write")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--max-side", type=int, default=None,
                      help="cap the longer side (default 256; FFCV's ResNet-50 packs at up to 500: "
                      "5.6x the bytes, 3.4x the decode time, docs/IMAGENET.md)")
    size.add_argument("--short-side", type=int, default=None, help="cap the shorter side instead")
    size.add_argument("--keep-size", action="store_true", help="store every image at its own size")
    ap.add_argument("--quality", type=int, default=90, help="JPEG quality of re-encoded images")
    ap.add_argument("--classes-from", default=None,
                    help="index by this split's synsets (e.g. ROOT/train when packing ROOT/val)")
    ap.add_argument("--threads", type=int, default=None, help="worker threads (default: all cores)")
    ap.add_argument("--skip-bad", action="store_true", help="leave unreadable images out, and list them")
    ap.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.keep_size:
        limit = Limit(LIMIT_NONE, 0, args.quality)
    elif args.short_side is not None:
        limit = Limit(LIMIT_SHORTER, args.short_side, args.quality)
    else:
        limit = Limit(LIMIT_LONGER, args.max_side or 256, args.quality)
    try:
        if Path(args.out).exists() and not args.overwrite:
            raise DataError(f"{args.out}: already exists; pass --overwrite to replace it")
        classes = ImageFolder(args.classes_from).classes if args.classes_from else None
        source = ImageFolder(args.src, classes=classes)
        stats = pack(source, args.out, limit, threads=args.threads, skip_bad=args.skip_bad,
                     progress=lambda k: print(f"{k}/{len(source)} images", file=sys.stderr))
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name in stats.bad:
        print(f"skipped (unreadable): {name}", file=sys.stderr)
    print(f"{args.out}: {stats.images} images, {len(source.classes)} classes, {stats.bytes / 1e6:.1f} MB"
          + (f", {len(stats.bad)} unreadable skipped" if stats.bad else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
