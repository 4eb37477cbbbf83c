"""What the loader reads images from: an :class:`ImageSource` is a numbered
list of encoded images with their labels. ``folder.ImageFolder`` (files in
the ImageFolder layout) and ``pack.PackedSource`` (one packed file) are the
two; :func:`open_source` picks by what the path is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class ImageSource(Protocol):
    """Encoded images numbered 0..len-1, in class order (the class index is
    the position of the synset in the sorted synset list)."""

    @property
    def labels(self) -> torch.Tensor:
        """int64 (len,): the class index of each image."""
        ...

    @property
    def classes(self) -> list[str]:
        """The synsets, sorted: ``classes[label]`` is an image's synset."""
        ...

    def __len__(self) -> int: ...

    def read(self, i: int) -> bytes:
        """The encoded bytes of image ``i`` (a JPEG file's contents)."""
        ...

    def name(self, i: int) -> str:
        """Where image ``i`` comes from, for error messages."""
        ...


def open_source(path: str | Path, classes: list[str] | None = None) -> ImageSource:
    """A packed file (pack.py) or an ImageFolder split folder (``root/train``),
    by what ``path`` is. ``classes`` (folders only): the synset list to index
    by, e.g. the training split's for the validation split."""
    from dawnbench_fast.data.imagenet.folder import ImageFolder
    from dawnbench_fast.data.imagenet.pack import PackedSource

    path = Path(path)
    if path.is_file():
        return PackedSource(path)
    return ImageFolder(path, classes=classes)
