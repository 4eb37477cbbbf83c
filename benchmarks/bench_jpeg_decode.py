"""JPEG decoding on the real ImageNet sample: Pillow against libjpeg-turbo
through simplejpeg, in the loader's decode path, against the plain PIL
baseline; and what packing at 256 or 500 px costs in bytes and decode time
(pytest-benchmark; one core each).

    python benchmarks/bench_jpeg_decode.py [--rounds 7] [--json FILE]
    python -m pytest benchmarks/bench_jpeg_decode.py [--benchmark-autosave]

The script prints images/s (the median round) and each figure against the
baseline, with the bytes per image of each form of the data.

- ``pil_baseline``: ``np.asarray(Image.open(...).convert("RGB"))``, the full
  image, as a torchvision-style dataset decodes;
- ``decode_pil`` / ``decode_simplejpeg``: the loader's decode step with each
  decoder (data/imagenet/jpeg.py, jpeg_turbo.py): the header, the DCT
  reduction the training crop allows (Pillow's draft mode; the same 1/2^k
  asked of libjpeg-turbo), the decode into an RGB array;
- ``loader_pil`` / ``loader_simplejpeg``: ``ImageNetLoader`` on one thread,
  the whole path (decode, random-resized crop, resize, flip, into the batch).

Training crops are drawn by the loader's keyed randomness (seed 0, epoch 0)
at ``BENCH_SIZE`` px (default 192, the recipe's last training side). Forms
of the images: ``jpeg`` (the files as they are, about 500 x 375 and 110 KB)
and ``packed256`` / ``packed500`` (pack.py's one-time copy, longer side at
most 256 px, our default, or 500 px, FFCV's ResNet-50 setting). The data:
$DAWNBENCH_IMAGENET_SAMPLE, else ``shared/data/imagenet-sample`` beside the
checkout, else generated images of ImageNet's typical size.
``BENCH_IMAGES`` images per round (default 100), ``BENCH_ROUNDS`` timed
rounds (default 7) after one warm-up round. Without simplejpeg its cases skip.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from bench_imagenet_loader import MemorySource, sample_split
from knobs import env_int
from PIL import Image

from dawnbench_fast.data.imagenet import crop
from dawnbench_fast.data.imagenet.folder import ImageFolder
from dawnbench_fast.data.imagenet.jpeg import draft_scale
from dawnbench_fast.data.imagenet.jpeg_turbo import get_decoder
from dawnbench_fast.data.imagenet.loader import ImageNetLoader
from dawnbench_fast.data.imagenet.pack import Limit, PackedSource, pack

IMAGES = env_int("BENCH_IMAGES", 100)
ROUNDS = env_int("BENCH_ROUNDS", 7)
SIZE = env_int("BENCH_SIZE", 192)
FORMS = {"jpeg": None, "packed256": 256, "packed500": 500}
IMPLS = ("pil_baseline", "decode_pil", "decode_simplejpeg", "loader_pil", "loader_simplejpeg")
HAS_SIMPLEJPEG = importlib.util.find_spec("simplejpeg") is not None


@pytest.fixture(scope="session")
def forms(tmp_path_factory) -> dict[str, MemorySource]:
    """The images as they are and packed at each longer side, in memory."""
    tmp = tmp_path_factory.mktemp("jpeg-bench")
    split, what = sample_split(tmp, IMAGES)
    folder = ImageFolder(split)
    n = min(IMAGES, len(folder))
    labels = folder.labels[:n].tolist()
    out = {}
    for form, side in FORMS.items():
        source = folder
        if side is not None:
            pack(folder, tmp / f"{form}.pack", Limit(side=side), threads=1)
            source = PackedSource(tmp / f"{form}.pack")
        out[form] = MemorySource([source.read(i) for i in range(n)], labels, f"{what}, {form}")
    return out


def _baseline(source: MemorySource) -> int:
    for i in range(len(source)):
        np.asarray(Image.open(io.BytesIO(source.read(i))).convert("RGB"))
    return len(source)


def _decode_step(source: MemorySource, decoder_name: str, size: int) -> int:
    """The loader's decode step (ImageNetLoader._load_one up to the resize)."""
    decoder = get_decoder(decoder_name)
    u = crop.keyed_uniforms(0, 0, np.arange(len(source)))
    for i in range(len(source)):
        width, height, handle = decoder.open(source.read(i), f"image {i}")
        box, _ = crop.train_box(width, height, u[i])
        s = draft_scale(width, height, box.x1 - box.x0, box.y1 - box.y0, size, size)
        decoder.decode(handle, f"image {i}", s)
    return len(source)


def _loader_epoch(loader: ImageNetLoader, size: int) -> int:
    return sum(len(idx) for _, _, idx in loader.train_batches(0, size))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("form", list(FORMS))
def test_decode(benchmark, forms, form, impl):
    if impl.endswith("simplejpeg") and not HAS_SIMPLEJPEG:
        pytest.skip("simplejpeg unavailable here (pip install 'dawnbench-fast[jpeg]')")
    source = forms[form]
    benchmark.group = f"JPEG decode, {form}, {SIZE} px crops, one core"
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    loader = None
    try:
        if impl == "pil_baseline":
            fn = lambda: _baseline(source)  # noqa: E731
        elif impl.startswith("decode_"):
            fn = lambda: _decode_step(source, impl.removeprefix("decode_"), SIZE)  # noqa: E731
        else:
            loader = ImageNetLoader(source, global_batch=len(source), seed=0, threads=1,
                                    decoder=impl.removeprefix("loader_"))
            fn = lambda: _loader_epoch(loader, SIZE)  # noqa: E731
        done = benchmark.pedantic(fn, rounds=ROUNDS, iterations=1, warmup_rounds=1)
        assert done == len(source)
    finally:
        torch.set_num_threads(torch_threads)
        if loader is not None:
            loader.close()
    if benchmark.stats is None:  # --benchmark-disable: run once, nothing timed
        return
    benchmark.extra_info.update(images=len(source), images_per_s=len(source) / benchmark.stats.stats.median,
                                bytes_per_image=sum(len(source.read(i)) for i in range(len(source)))
                                / len(source), data=source.what, size=SIZE)


def table(results: dict) -> str:
    """The saved JSON as images/s per form and case, with the ratio to the baseline."""
    rows: dict[str, dict[str, dict]] = {}
    for b in results["benchmarks"]:
        rows.setdefault(b["params"]["form"], {})[b["params"]["impl"]] = b["extra_info"]
    lines = [f"{'form':<10} {'KB/image':>8}  " + "  ".join(f"{i:>17}" for i in IMPLS)]
    for form, cases in rows.items():
        base = cases.get("pil_baseline", {}).get("images_per_s")
        kb = next(iter(cases.values()))["bytes_per_image"] / 1e3
        cells = []
        for impl in IMPLS:
            rate = cases.get(impl, {}).get("images_per_s")
            cells.append(f"{'-':>17}" if rate is None else
                         f"{rate:7.0f}/s ({rate / base:4.2f}x)" if base else f"{rate:17.0f}")
        lines.append(f"{form:<10} {kb:8.1f}  " + "  ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import script_entry

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="other arguments go to pytest")
    ap.add_argument("--images", type=int, help="images per round (BENCH_IMAGES)")
    ap.add_argument("--rounds", type=int, help="timed rounds (BENCH_ROUNDS)")
    ap.add_argument("--size", type=int, help="training crop side in px (BENCH_SIZE)")
    ap.add_argument("--json", help="also write pytest-benchmark's JSON here")
    args, rest = ap.parse_known_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.json or str(Path(tmp) / "bench.json")
        code = script_entry.run(__file__, {"BENCH_IMAGES": args.images, "BENCH_ROUNDS": args.rounds,
                                           "BENCH_SIZE": args.size}, path, pytest_args=["-q", *rest])
        if Path(path).is_file():
            print(table(json.loads(Path(path).read_text())))
    return code


if __name__ == "__main__":
    sys.exit(main())
