"""Results written atomically: a temporary name in the same folder, then a
rename over the final one, so that a run killed at any moment (even ``kill
-9``) leaves either the previous file or the new one, never half a file. Every
result file, checkpoint and report of the project is written through here.

A write that the system refuses (disk full, quota, read-only or vanished
folder) is a :class:`WriteFailed`: one line naming the file, its folder and
the cause, the temporary file removed and the previous file left as it was.
:func:`write_stream` keeps the cause when a writer hides it: torch.save's C++
writer reports a full disk as "unexpected pos 4000704 vs 598".
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


class WriteFailed(Exception):
    """The system refused to write ``path`` (``cause``: the OSError)."""

    def __init__(self, path: Path, cause: OSError, hint: str = ""):
        self.path, self.cause, self.hint = path, cause, hint
        why = cause.strerror or str(cause) or type(cause).__name__
        super().__init__(f"cannot write {path.name} in {path.parent}/: {why}" + (f"; {hint}" if hint else ""))

    def with_hint(self, hint: str) -> WriteFailed:
        """The same failure, with what the user can do about it."""
        return WriteFailed(self.path, self.cause, hint)


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` on success."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(fd)
    except OSError as e:
        raise WriteFailed(path, e) from e
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise WriteFailed(path, e) from e
        raise


class _KeepError:
    """A raw file whose write writes everything or raises, and keeps the OSError."""

    def __init__(self, raw: object):
        self.raw, self.error = raw, None

    def write(self, data: bytes) -> int:
        view, done = memoryview(data), 0
        try:
            while done < len(view):  # a raw write may take only part
                done += self.raw.write(view[done:])
        except OSError as e:
            self.error = e
            raise
        return done

    def flush(self) -> None:
        pass


def write_stream(path: Path, write: Callable[[object], None]) -> None:
    """``write(f)`` into a temporary file renamed over ``path``, synced to
    disk first (a full disk may surface only then). An OSError of the file is
    a :class:`WriteFailed` even when ``write`` re-raised it as another error."""
    with atomic_path(path) as tmp, open(tmp, "wb", buffering=0) as raw:
        f = _KeepError(raw)
        try:
            write(f)
        except Exception as e:
            if f.error is not None and not isinstance(e, OSError):
                raise f.error from e
            raise
        os.fsync(raw.fileno())


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: Path, obj: object) -> None:
    write_text(path, json.dumps(obj, indent=2, default=str) + "\n")
