"""Decoding: encoded bytes to a uint8 RGB HWC array, through Pillow.

JPEG files can be decoded at 1/2, 1/4 or 1/8 of their size (libjpeg's DCT
scaling, Pillow's ``Image.draft``): the inverse DCT then produces fewer
pixels, which is cheaper and is itself a good downscale (each output pixel is
a block average). The loader asks for it only when the crop it will cut still
has at least the output's size in pixels after the reduction
(:func:`draft_scale`), so no crop is ever upsampled because of it.

Grayscale, CMYK, palette and other modes are converted to RGB. Any file
Pillow cannot read (corrupt, truncated, not an image) is a :class:`BadImage`
naming the file. Pillow releases the GIL while it decodes, so threads decode
in parallel.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from dawnbench_fast.data.imagenet.errors import BadImage

DRAFT_SCALES = (8, 4, 2, 1)  # the reductions Pillow's draft mode offers for JPEG


def _reason(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def open_image(data: bytes, name: str) -> Image.Image:
    """The image's header, parsed (size, mode, format); the pixels are not decoded yet."""
    try:
        # (no warnings.catch_warnings here: it swaps process-wide state and the
        # loader's threads call this concurrently; a bomb warning on a huge image is harmless)
        img = Image.open(io.BytesIO(data))
    except Exception as e:  # UnidentifiedImageError, OSError, SyntaxError from plugins...
        raise BadImage(name, _reason(e)) from e
    if img.width < 1 or img.height < 1:
        raise BadImage(name, f"empty image {img.width}x{img.height}")
    return img


def draft_scale(width: int, height: int, box_w: float, box_h: float, out_w: int, out_h: int) -> int:
    """The largest JPEG reduction (1, 2, 4 or 8) after which a ``box_w`` x
    ``box_h`` region of a ``width`` x ``height`` image still has at least
    ``out_w`` x ``out_h`` pixels (so resizing it to the output only shrinks)."""
    for s in DRAFT_SCALES:
        # the reduced image is ceil(width / s) wide; the box shrinks by s exactly
        if box_w / s >= out_w and box_h / s >= out_h and width >= s and height >= s:
            return s
    return 1


def decode(img: Image.Image, name: str, scale: int = 1) -> tuple[np.ndarray, int]:
    """Decode an opened image, at 1/``scale`` of its size when it is a JPEG
    (``scale`` from :func:`draft_scale`). Returns the (H, W, 3) uint8 array and
    the reduction actually applied (1 for other formats): a pixel (x, y) of
    the original is at (x / s, y / s) in the array."""
    width, height = img.size
    s = 1
    try:
        if scale > 1 and img.format == "JPEG":
            img.draft("RGB", (max(1, width // scale), max(1, height // scale)))
            # what draft chose, from the size it set: ceil(width / s)
            s = next((k for k in DRAFT_SCALES if (width + k - 1) // k == img.width
                      and (height + k - 1) // k == img.height), 1)
        if img.mode != "RGB":
            img = img.convert("RGB")  # loads first; L, CMYK, P, RGBA, I;16 ...
        else:
            img.load()
        arr = np.asarray(img)
    except Exception as e:  # truncated data, broken Huffman tables, ...
        raise BadImage(name, _reason(e)) from e
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
        raise BadImage(name, f"decoded to {arr.dtype} {arr.shape}, not 8-bit RGB")
    return arr, s


def decode_rgb(data: bytes, name: str = "<bytes>", scale: int = 1) -> np.ndarray:
    """Bytes to a (H, W, 3) uint8 RGB array (at 1/``scale`` for a JPEG, when
    the image allows it; see :func:`decode` for the reduction applied)."""
    return decode(open_image(data, name), name, scale)[0]


class PilDecoder:
    """The loader's default decoder (``--decoder pil``): Pillow, draft mode
    where the crop allows. ``open`` parses the header only; ``decode`` decodes
    at 1/``scale`` and returns the reduction applied (:func:`decode`)."""

    name = "pil"

    def open(self, data: bytes, name: str) -> tuple[int, int, Image.Image]:
        """(width, height, handle for :meth:`decode`)."""
        img = open_image(data, name)
        return img.width, img.height, img

    def decode(self, handle: Image.Image, name: str, scale: int) -> tuple[np.ndarray, int]:
        return decode(handle, name, scale)
