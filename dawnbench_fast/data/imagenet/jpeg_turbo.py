"""``--decoder simplejpeg``: JPEG decoding by libjpeg-turbo through simplejpeg
(the optional extra ``pip install "dawnbench-fast[jpeg]"``), and the choice
between it and Pillow (:func:`get_decoder`).

Why a second decoder: Pillow's wheels decode with libjpeg-turbo too, but a
decode goes through its image object (RGBX storage, then a copy into the
RGB array the resize reads); simplejpeg writes the RGB array directly. On the
ImageNet sample that is 20-40% more images/s for the decode alone
(docs/PERFORMANCE.md, "JPEG decoders"). The pixels are the same: both run
libjpeg-turbo's default (accurate) IDCT and fancy upsampling, and the DCT
scaling is asked for exactly as Pillow's draft mode does it, 1/1, 1/2, 1/4 or
1/8 (tests/imagenet/test_imagenet_decoders.py compares them).

What libjpeg-turbo cannot turn into RGB (CMYK and YCCK JPEGs, about 20 files
of ImageNet's training set) and files that are not JPEGs at all (ImageNet
holds a PNG named .JPEG) go through Pillow, image by image, as the format
requires; the decoder chosen is never swapped for another when its package is
missing: that is a one-line :class:`~.errors.DecoderUnavailable`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np

from dawnbench_fast.data.imagenet.errors import BadImage, DecoderUnavailable
from dawnbench_fast.data.imagenet.jpeg import DRAFT_SCALES, PilDecoder, _reason

DECODERS = ("pil", "simplejpeg")  # --decoder's choices; pil is the default and always there
_RGB_SOURCES = ("YCbCr", "Gray", "RGB")  # colour spaces libjpeg-turbo converts to RGB


def _simplejpeg() -> ModuleType:
    """The simplejpeg module, or the one-line error that says how to get it."""
    try:
        return importlib.import_module("simplejpeg")
    except ImportError:
        raise DecoderUnavailable(
            "--decoder simplejpeg: the simplejpeg package is not installed; pip install "
            "'dawnbench-fast[jpeg]' (or simplejpeg), or use --decoder pil") from None


class TurboDecoder:
    """simplejpeg for JPEGs in YCbCr, grayscale or RGB; Pillow for the rest."""

    name = "simplejpeg"

    def __init__(self) -> None:
        self._sj = _simplejpeg()
        self._pil = PilDecoder()

    def open(self, data: bytes, name: str) -> tuple[int, int, object]:
        """(width, height, handle for :meth:`decode`): the header only."""
        try:
            height, width, colorspace, _ = self._sj.decode_jpeg_header(data)
        except ValueError:  # not a JPEG (or a broken one): Pillow names the problem
            return self._pil.open(data, name)
        if colorspace not in _RGB_SOURCES or width < 1 or height < 1:
            return self._pil.open(data, name)
        return width, height, (data, width, height)

    def decode(self, handle: object, name: str, scale: int) -> tuple[np.ndarray, int]:
        if not isinstance(handle, tuple):  # opened by Pillow
            return self._pil.decode(handle, name, scale)
        data, width, height = handle
        try:
            # the smallest output of at least ceil(side / scale) is exactly 1/scale,
            # as in Pillow's draft mode (libjpeg-turbo also has 3/8, 5/8 ..., never chosen here)
            arr = self._sj.decode_jpeg(data, "RGB", min_height=-(-height // scale),
                                       min_width=-(-width // scale))
        except ValueError as e:  # truncated data, broken Huffman tables, ...
            raise BadImage(name, _reason(e)) from e
        s = next((k for k in DRAFT_SCALES
                  if -(-width // k) == arr.shape[1] and -(-height // k) == arr.shape[0]), None)
        if s is None or arr.ndim != 3 or arr.shape[2] != 3:
            raise BadImage(name, f"decoded to {arr.shape}, not {width}x{height} RGB at a 1/2^k scale")
        return arr, s


def get_decoder(name: str) -> PilDecoder | TurboDecoder:
    """The decoder ``--decoder NAME`` asks for; a one-line DecoderUnavailable
    when its package is missing or the name is unknown."""
    if name == "pil":
        return PilDecoder()
    if name == "simplejpeg":
        return TurboDecoder()
    raise DecoderUnavailable(f"--decoder {name}: unknown; choose one of {', '.join(DECODERS)}")
