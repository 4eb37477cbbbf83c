"""The ImageFolder layout: ``root/train/<synset>/*.JPEG`` and
``root/val/<synset>/*.JPEG``, as ILSVRC-2012 is unpacked for torchvision.

The class index of a synset is its position in the sorted list of synset
folders (the ILSVRC-2012 standard: ``n01440764`` is 0, ``n15075141`` is 999),
so a model trained here scores against any other tool's labels. Images are
numbered class by class, files sorted by name within a class, so an index
means the same file on every machine and every process.

Every problem is a :class:`DataError` in one line naming the path and the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from dawnbench_fast.data.imagenet.errors import BadImage, DataError
from dawnbench_fast.data.imagenet.source import LabelledImages

# What the loader decodes (Pillow opens by content; the suffix only decides
# which files in a class folder count as images, as torchvision's ImageFolder does).
IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png", ".bmp", ".ppm", ".webp", ".tif", ".tiff")
LAYOUT = "root/train/<synset>/*.JPEG and root/val/<synset>/*.JPEG (docs/IMAGENET.md)"


def is_image_file(name: str) -> bool:
    return name.lower().endswith(IMAGE_SUFFIXES) and not name.startswith(".")


def _class_folders(split_dir: Path) -> list[str]:
    """The synset folders of a split, sorted; errors for a missing split or
    one without class folders (naming the flat validation layout when it is that)."""
    if not split_dir.is_dir():
        what = "a file, not a folder" if split_dir.exists() else "no such folder"
        raise DataError(f"{split_dir}: {what}; point the data path at an ImageFolder root: {LAYOUT}")
    with os.scandir(split_dir) as it:
        entries = [(e.name, e.is_dir()) for e in it if not e.name.startswith(".")]
    folders = sorted(name for name, is_dir in entries if is_dir)
    if not folders:
        flat = sum(1 for name, is_dir in entries if not is_dir and is_image_file(name))
        if flat:
            raise DataError(f"{split_dir}: {flat} images but no class folders (the flat validation "
                            f"layout); arrange them with python -m dawnbench_fast.data.imagenet.val_layout")
        raise DataError(f"{split_dir}: no class folders; expected {LAYOUT}")
    return folders


def _images_in(folder: Path) -> list[str]:
    with os.scandir(folder) as it:
        return sorted(e.name for e in it if is_image_file(e.name) and not e.is_dir())


class ImageFolder(LabelledImages):
    """One split of an ImageFolder tree as an :class:`~.source.ImageSource`.

    ``classes``: the synset list to index by (e.g. the training split's, for
    the validation split), so that both splits share one mapping even if a
    split lacks a class; a folder that is not in it is an error. Without it,
    the split's own folders are the classes and each must hold an image.
    """

    def __init__(self, split_dir: str | Path, classes: list[str] | None = None):
        self.root = Path(split_dir)
        folders = _class_folders(self.root)
        if classes is None:
            classes = folders
        else:
            unknown = sorted(set(folders) - set(classes))
            if unknown:
                raise DataError(f"{self.root / unknown[0]}: not one of the {len(classes)} classes of the "
                                f"training split ({len(unknown)} such folders); remove it or fix the layout")
        self._classes = list(classes)
        paths: list[str] = []
        counts: list[int] = []
        for synset in self._classes:
            folder = self.root / synset
            names = _images_in(folder) if folder.is_dir() else []
            if not names and classes is folders:
                raise DataError(f"{folder}: no image files ({', '.join(IMAGE_SUFFIXES[:3])}, ...); "
                                f"remove the empty class folder or restore its images")
            paths += [os.path.join(folder, n) for n in names]
            counts.append(len(names))
        if not paths:
            raise DataError(f"{self.root}: no image files in its class folders; expected {LAYOUT}")
        self._paths = paths
        self._labels = torch.from_numpy(np.repeat(np.arange(len(self._classes), dtype=np.int64), counts))

    def read(self, i: int) -> bytes:
        try:
            with open(self._paths[i], "rb") as f:
                return f.read()
        except OSError as e:  # vanished or unreadable since the listing: that file's problem
            raise BadImage(self._paths[i], f"cannot be read: {e.strerror or e}") from e

    def name(self, i: int) -> str:
        return self._paths[i]


def open_splits(root: str | Path) -> tuple[ImageFolder, ImageFolder]:
    """``root/train`` and ``root/val``, the validation split indexed by the
    training split's synsets."""
    root = Path(root)
    if not root.is_dir():
        what = "a file, not a folder" if root.exists() else "no such folder"
        raise DataError(f"{root}: {what}; point the data path at an ImageFolder root: {LAYOUT}")
    train = ImageFolder(root / "train")
    return train, ImageFolder(root / "val", classes=train.classes)
