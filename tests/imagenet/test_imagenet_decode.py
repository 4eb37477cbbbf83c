"""Decoding, crops and the resize kernel of the ImageNet pipeline
(data/imagenet/jpeg.py, crop.py, resize.py) against Pillow, the reference
torchvision's PIL path uses, on the real sample JPEGs.

Tolerances, and why:
- Full-size decode + our crop/resize/flip vs ``img.crop(box).resize(size,
  BILINEAR)`` (+ ``FLIP_LEFT_RIGHT``): at most 1 grey level anywhere, mean
  at most 0.3. The kernel is Pillow's filter with Pillow's 22-bit
  fixed-point weights and a uint8 intermediate, but it picks the pass order
  (vertical first when shrinking along y, which is cheaper) while Pillow 13
  mostly runs the horizontal pass first; the rounding of the intermediate
  then differs by one on up to a quarter of the values (weights are
  non-negative and sum to one, so never by more). Against Pillow made to
  run the same order (two one-axis resizes, each exact in Pillow) the
  result is identical, bit for bit, on every image: that pins the arithmetic.
- Draft mode (the JPEG decoded at 1/2..1/8 by DCT scaling) vs the same PIL
  reference on the full decode: mean absolute difference at most 2 over the
  sample and at most 6 on any one image, 99th percentile at most 32. DCT
  scaling averages 8x8 blocks, a different low-pass than the triangle
  filter, so edges differ by tens of levels while flat areas agree; the
  means bound a shift or a colour error, which would show everywhere.
Output buffers are filled with 77 before each call, so a pixel the kernel
fails to write shows up against the reference.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from support.imagenet_sample import sample_files

from dawnbench_fast.data.imagenet import crop
from dawnbench_fast.data.imagenet.errors import BadImage
from dawnbench_fast.data.imagenet.jpeg import decode, decode_rgb, draft_scale, open_image
from dawnbench_fast.data.imagenet.resize import resize_into

POISON = 77


def _ours(data: bytes, name: str, box: crop.Box, flip: bool, out_hw: tuple[int, int],
          use_draft: bool) -> tuple[np.ndarray, int]:
    img = open_image(data, name)
    w, h = img.size
    s = draft_scale(w, h, box.x1 - box.x0, box.y1 - box.y0, out_hw[1], out_hw[0]) if use_draft else 1
    pixels, s = decode(img, name, s)
    b = crop.scaled(box, s, pixels.shape[1], pixels.shape[0])
    out = np.full((*out_hw, 3), POISON, np.uint8)
    resize_into(pixels, out, b.x0, b.y0, b.x1, b.y1, *b.clip, flip)
    return out, s


def _pil_train(data: bytes, box: crop.Box, flip: bool, out_hw: tuple[int, int],
               order: str | None = None) -> np.ndarray:
    """PIL's crop + bilinear resize (+ flip); with ``order`` "h" or "v", as
    two one-axis resizes in that order (Pillow's own passes, one at a time)."""
    img = Image.open(io.BytesIO(data)).convert("RGB").crop(box.clip)
    if order == "h":
        img = img.resize((out_hw[1], img.height), Image.BILINEAR)
    elif order == "v":
        img = img.resize((img.width, out_hw[0]), Image.BILINEAR)
    ref = img.resize(out_hw[::-1], Image.BILINEAR)
    return np.asarray(ref.transpose(Image.FLIP_LEFT_RIGHT) if flip else ref)


def _diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.int16) - b.astype(np.int16))


@pytest.mark.parametrize("size", [160, 224])
def test_train_crop_matches_pil_on_the_sample(size):
    files = sample_files()
    u = crop.keyed_uniforms(0, 3, np.arange(len(files)))
    flips = 0
    for i, f in enumerate(files):
        data = f.read_bytes()
        w, h = Image.open(f).size
        box, flip = crop.train_box(w, h, u[i])
        flips += flip
        ours, _ = _ours(data, str(f), box, flip, (size, size), use_draft=False)
        d = _diff(ours, _pil_train(data, box, flip, (size, size)))
        assert d.max() <= 1 and d.mean() <= 0.3, (f.name, d.max(), d.mean())
        order = "v" if box.y1 - box.y0 > size else "h"  # the kernel's choice
        assert np.array_equal(ours, _pil_train(data, box, flip, (size, size), order)), f.name
    assert 30 < flips < 70  # the flip is drawn, about half the time


def test_draft_mode_decode_matches_pil_within_tolerance():
    files = sample_files()
    u = crop.keyed_uniforms(1, 0, np.arange(len(files)))
    means, p99, scales = [], [], []
    for i, f in enumerate(files):
        data = f.read_bytes()
        w, h = Image.open(f).size
        box, flip = crop.train_box(w, h, u[i])
        ours, s = _ours(data, str(f), box, flip, (64, 64), use_draft=True)
        scales.append(s)
        if s > 1:
            d = _diff(ours, _pil_train(data, box, flip, (64, 64)))
            means.append(d.mean())
            p99.append(np.percentile(d, 99))
    assert sum(s > 1 for s in scales) > 50 and max(scales) >= 4  # the reduced path did run
    assert np.mean(means) <= 2 and max(means) <= 6 and max(p99) <= 32, (np.mean(means), max(means), max(p99))


def test_validation_centre_crop_matches_resize_then_crop():
    for f in sample_files()[::7]:
        data = f.read_bytes()
        img = Image.open(io.BytesIO(data)).convert("RGB")
        for size in (160, 224):
            box = crop.val_box(img.width, img.height, size)
            ours, _ = _ours(data, str(f), box, False, (size, size), use_draft=False)
            new_w, new_h = crop.resized_size(img.width, img.height, round(size / 0.875))
            left, top = round((new_w - size) / 2), round((new_h - size) / 2)
            ref = np.asarray(img.resize((new_w, new_h), Image.BILINEAR).crop((left, top, left + size,
                                                                               top + size)))
            d = _diff(ours, ref)
            assert d.max() <= 1 and d.mean() <= 0.3, (f.name, size, d.max(), d.mean())


@pytest.mark.parametrize("src_hw, box, out_hw", [
    ((37, 53), (0, 0, 53, 37), (61, 29)),  # up in x, down in y, odd sizes
    ((40, 40), (3.5, 2.25, 30.75, 39.0), (13, 17)),  # fractional box
    ((1, 1), (0, 0, 1, 1), (5, 3)),  # one pixel
    ((20, 300), (10, 0, 290, 20), (32, 64)),
])
def test_kernel_odd_shapes_match_pil(src_hw, box, out_hw):
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, (*src_hw, 3), dtype=np.uint8)
    for flip in (False, True):
        out = np.full((*out_hw, 3), POISON, np.uint8)
        resize_into(src, out, *box, 0, 0, src_hw[1], src_hw[0], flip)
        ref = Image.fromarray(src).resize(out_hw[::-1], Image.BILINEAR, box=box)
        ref = np.asarray(ref.transpose(Image.FLIP_LEFT_RIGHT) if flip else ref)
        assert _diff(out, ref).max() <= 1


def test_grayscale_and_cmyk_become_rgb():
    gray = [f for f in sample_files() if Image.open(f).mode == "L"]
    assert len(gray) == 1  # the sample's one grayscale image
    pixels = decode_rgb(gray[0].read_bytes(), str(gray[0]))
    assert pixels.shape[2] == 3 and (pixels[..., 0] == pixels[..., 2]).all()
    assert np.array_equal(pixels[..., 1], np.asarray(Image.open(gray[0])))
    buf = io.BytesIO()
    Image.open(sample_files()[0]).convert("CMYK").save(buf, "JPEG", quality=95)
    cmyk = decode_rgb(buf.getvalue())
    assert cmyk.shape[2] == 3
    assert np.array_equal(cmyk, np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")))


def test_bad_files_raise_bad_image_naming_the_file():
    data = sample_files()[0].read_bytes()
    with pytest.raises(BadImage) as err:
        decode_rgb(data[: len(data) // 2], "cut.JPEG")  # header intact, data truncated
    assert str(err.value).startswith("cut.JPEG: not a readable image") and "\n" not in str(err.value)
    with pytest.raises(BadImage, match="notes.JPEG: not a readable image"):
        decode_rgb(b"these are not the pixels you are looking for", "notes.JPEG")
    with pytest.raises(BadImage):
        decode_rgb(b"", "empty.JPEG")


def test_keyed_randomness_depends_on_seed_epoch_index_only():
    idx = np.array([5, 17, 123_456, 1_281_166])
    a = crop.keyed_uniforms(7, 2, idx)
    assert np.array_equal(a[2], crop.keyed_uniforms(7, 2, [123_456])[0])  # batch-independent
    assert np.array_equal(a[::-1], crop.keyed_uniforms(7, 2, idx[::-1]))
    assert not np.array_equal(a, crop.keyed_uniforms(7, 3, idx))
    assert not np.array_equal(a, crop.keyed_uniforms(8, 2, idx))
    assert a.min() >= 0 and a.max() < 1 and a.shape == (4, crop.UNIFORMS)
    many = crop.keyed_uniforms(0, 0, np.arange(20_000), 2)
    assert abs(many.mean() - 0.5) < 0.01 and abs(np.corrcoef(many[:, 0], many[:, 1])[0, 1]) < 0.03
    perm = crop.keyed_permutation(0, 1, 1000)
    assert sorted(perm) == list(range(1000)) and not np.array_equal(perm, crop.keyed_permutation(0, 2, 1000))


def test_random_resized_crop_follows_torchvision_rule():
    rng = np.random.default_rng(0)
    areas, ratios = [], []
    for _ in range(2000):
        x, y, w, h = crop.random_resized_crop(500, 375, rng.random(crop.UNIFORMS))
        assert 0 <= x and x + w <= 500 and 0 <= y and y + h <= 375
        areas.append(w * h / (500 * 375))
        ratios.append(w / h)
    assert 0.075 < min(areas) and max(areas) <= 1.0 and 0.74 < min(ratios) and max(ratios) < 1.34
    # no try fits in a very wide image: the fallback is the centre crop at ratio 4/3
    assert crop.random_resized_crop(1000, 10, np.full(crop.UNIFORMS, 0.999)) == (493, 0, 13, 10)
