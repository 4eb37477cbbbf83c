"""A run's claim on its output folder, taken before it writes anything.

Looking first ("is --out empty?") and writing later lets two runs started
together both find the folder empty and both write into it. So the run takes
the folder first, atomically, and only then looks: it holds an exclusive
``flock`` on ``FOLDER/.claim`` (a dotfile, which no listing of run files
matches), whose text is its pid and host, for the words of a refusal. The
kernel grants the lock to one open file at a time, whatever the timing, and
drops it when its holder dies, however it dies (``kill -9`` included): a
claim file left by a killed run is not held by anyone, and the next run
takes it over. A run that ends removes the file, and the folders it created
if they are still empty (a run refused or failed before its first result
leaves nothing behind).

Where the file system keeps no locks (some network mounts) the pid in the
file decides instead: a claim of a live process on this host is respected,
any other is taken over; that check is not atomic.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

CLAIM_NAME = ".claim"


# Only the standard library here (a bare process can hold a claim); the command turns these into
# its one-line errors (runner/cli.py: claim_out).
class ClaimError(ValueError):
    """The folder cannot be claimed; the message names it and what to do."""


class FolderInUse(ClaimError):
    """Another live run holds the folder's claim."""


@dataclass
class Claim:
    """A folder this process holds: :meth:`release` gives it back."""

    folder: Path
    fd: int
    # folders made for the claim, deepest first: removed on release while still empty
    created: list[Path] = field(default_factory=list)

    def release(self) -> None:
        """Remove the claim file (while still holding it, so that no other run
        locks a file that is about to go), then the folders made for it that
        are still empty. Idempotent."""
        if self.fd < 0:
            return
        try:
            os.unlink(self.folder / CLAIM_NAME)
        except FileNotFoundError:  # removed by hand: nothing to do
            pass
        finally:
            os.close(self.fd)
            self.fd = -1
        _remove_empty(self.created)


# The folder a writability check makes and removes at once (runner/cli.py); another run's check
# may have one in the folder at the moment this run looks.
PROBE_PREFIX = ".dawnbench-probe-"


def holds_files(folder: Path) -> bool:
    """Whether ``folder`` is a folder holding anything but a claim and a
    writability check's passing folder: an earlier run's results."""
    return folder.is_dir() and any(p.name != CLAIM_NAME and not p.name.startswith(PROBE_PREFIX)
                                   for p in folder.iterdir())


def holder(folder: Path) -> str:
    """Who holds ``folder``'s claim, in words: ``pid N`` (``on HOST`` when
    another host's), or ``an unknown process`` when the file says nothing."""
    words: list[str] = []
    for _ in range(20):  # its holder writes the pid a moment after it took the lock
        try:
            words = (folder / CLAIM_NAME).read_text().split()
        except OSError:
            words = []
        if words:
            break
        time.sleep(0.01)
    if not words:
        return "an unknown process"
    return f"pid {words[0]}" + (f" on {words[1]}" if len(words) > 1 and words[1] != _host() else "")


def claim(folder: Path) -> Claim:
    """Take ``folder`` (created if missing) for this process, or raise
    :class:`FolderInUse` naming the run that holds it; a :class:`ClaimError`
    when the folder cannot hold a claim (a read-only disk)."""
    created = _make_folders(folder)
    path = folder / CLAIM_NAME
    for _ in range(100):  # a claim released meanwhile may take its file (or folder) along: again
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            created = _make_folders(folder) or created
            continue
        except OSError as e:
            _remove_empty(created)
            raise ClaimError(f"--out {folder}: cannot hold a claim there ({e.strerror or e}); "
                             "pass a folder on a writable disk") from None
        try:
            if not _lock(fd):
                raise FolderInUse(f"--out {folder}: in use by another run ({holder(folder)}, or a process "
                                  "it started); pass another --out folder, or wait for that run to end")
            if _same_file(fd, path):
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()} {_host()}\n".encode())
                return Claim(folder, fd, created)
        except BaseException:
            os.close(fd)
            _remove_empty(created)
            raise
        os.close(fd)  # we locked a file its releasing holder had just removed: lock the new one
    raise ClaimError(f"--out {folder}: its claim file keeps changing; pass another --out folder")


def _lock(fd: int) -> bool:
    """Whether this process now holds the claim open as ``fd``."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
    # no locks on this file system: a live process of this host named in the file keeps it
    words = os.pread(fd, 256, 0).decode(errors="replace").split()
    if len(words) < 2 or words[1] != _host() or not words[0].isdigit() or int(words[0]) == os.getpid():
        return True
    try:
        os.kill(int(words[0]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        pass
    return False


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)


def _make_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; those this call created, deepest first."""
    missing, p = [], folder
    while not p.exists() and p.parent != p:
        missing.append(p)
        p = p.parent
    created = []
    for p in reversed(missing):
        try:
            os.mkdir(p)
            created.append(p)
        except FileExistsError:  # another run made it a moment ago: not ours to remove
            pass
        except OSError as e:
            _remove_empty(created[::-1])
            raise ClaimError(f"--out {folder}: cannot create {p} ({e.strerror or e}); "
                             "pass a folder on a writable disk") from None
    return created[::-1]


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # holds files (results, another run's claim): kept, and so are its parents
            break


def _host() -> str:
    return socket.gethostname() or "localhost"
