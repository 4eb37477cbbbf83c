"""The ImageNet pipeline's errors: one line each, naming the path and the fix.

Both derive from the CIFAR reader's :class:`DataError`, so a trainer's CLI
that prints DataError as one line on stderr (cifar.ERRORS) does the same for
these without knowing them.
"""

from __future__ import annotations

from dawnbench_fast.data.cifar10 import DataError

__all__ = ["BadImage", "DataError", "DecoderUnavailable"]


class BadImage(DataError):
    """One file that is not a readable image (corrupt, truncated, not an
    image at all). The loader raises it, or with ``skip_bad=True`` leaves the
    image out of its batch and lists the file in ``bad_files``."""

    def __init__(self, name: str, reason: str):
        self.name = name
        self.reason = reason
        super().__init__(f"{name}: not a readable image ({reason}); replace or remove the file, "
                         f"or pass skip_bad=True to leave such files out")


class DecoderUnavailable(DataError):
    """``--decoder NAME`` names a decoder whose package is not installed (or
    no decoder at all). Raised when the loader is built, never replaced by
    another decoder behind the user's back."""
