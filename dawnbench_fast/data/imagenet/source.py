"""What the loader reads images from: an :class:`ImageSource` is a numbered
list of encoded images with their labels. ``folder.ImageFolder`` (files in
the ImageFolder layout) and ``pack.PackedSource`` (one packed file) are the
two; ``loader.open_source`` picks by what the path is. Both hold their
labels and classes the same way, in :class:`LabelledImages`.
"""

from __future__ import annotations

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



class LabelledImages:
    """The part every source holds the same way: its labels and class list,
    set once by the subclass's constructor and read-only after; the number of
    images is the number of labels."""

    _labels: torch.Tensor
    _classes: list[str]

    @property
    def labels(self) -> torch.Tensor:
        return self._labels

    @property
    def classes(self) -> list[str]:
        return self._classes

    def __len__(self) -> int:
        return len(self._labels)
