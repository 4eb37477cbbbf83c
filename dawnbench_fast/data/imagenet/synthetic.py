"""A small generated ImageFolder (train/ and val/, one folder per class of
real JPEG files) for tests and smoke runs where ImageNet is not at hand.

Each class is a colour and a stripe direction, drawn with noise on images of
varied, non-square sizes, so a small net can learn it in a few steps and the
pipeline's crops and resizes see the shapes real photos have.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def synset_name(c: int) -> str:
    """A WordNet-like folder name for class ``c`` (sorted order = class order)."""
    return f"n{c:08d}"


def class_image(c: int, classes: int, rng: np.random.Generator, size: int) -> Image.Image:
    """One RGB image of class ``c``: its hue, stripes at its angle, noise."""
    h = int(rng.integers(size * 3 // 4, size * 5 // 4 + 1))
    w = int(rng.integers(size * 3 // 4, size * 5 // 4 + 1))
    hue = np.array([np.cos(2 * np.pi * (c / classes + k / 3)) for k in range(3)])
    colour = 128 + 90 * hue
    angle = np.pi * c / classes
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    stripes = np.sin((xx * np.cos(angle) + yy * np.sin(angle)) * (2 * np.pi / 12) + rng.uniform(0, 2 * np.pi))
    img = colour[None, None, :] * (0.75 + 0.25 * stripes[..., None])
    img += rng.normal(0, 12, size=img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def make_image_folder(root: str | Path, *, classes: int = 10, train_per_class: int = 20,
                      val_per_class: int = 5, size: int = 80, seed: int = 0) -> Path:
    """Write ``root/train/<synset>/*.JPEG`` and ``root/val/<synset>/*.JPEG``
    and return ``root``. Deterministic in ``seed``."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    for split, n in (("train", train_per_class), ("val", val_per_class)):
        for c in range(classes):
            folder = root / split / synset_name(c)
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                class_image(c, classes, rng, size).save(folder / f"{synset_name(c)}_{i}.JPEG", quality=90)
    return root
