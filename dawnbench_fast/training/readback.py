"""Reading back what a run wrote, when ``--resume`` goes on with it: each
seed's run.json (a finished seed: its result is reported again),
checkpoint.pt (an interrupted one: training goes on from it) and
epochs.jsonl (the per-epoch log, cut back and grown again).

The writers never leave half a file (atomic.py), but a copy, a disk or a
person can: a record cut short, emptied, not JSON, not text, with a key
missing or a value of another type. Any of these is one line,
:class:`Damaged` (a ConfigError: exit status 2), naming the file, what is
wrong with it and what to do, raised while the record is read back, before
anything is trained or written (dawnbench_fast.runner.runs checks every
record of a resumed command before its data is even read), so the folder is
left as it was. Never a traceback from deep inside a reader.

Two tools, for the two ways a record is used: :func:`expect` checks the
keys and types a reader takes on trust (a loop state's counters: a wrong
type there would only fail epochs later), and :func:`reading` turns any
failure while interpreting a record (a report made from a finished run's
result, a model state loaded from a checkpoint) into the same one line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dawnbench_fast.config.overrides import ConfigError

NUMBER = (int, float)  # bool is an int to Python, never a number here (see expect)


class Damaged(ConfigError):
    """A run record that ``--resume`` cannot use: one line naming the file,
    what is wrong with it, and what to do."""

    def __init__(self, path: Path, why: str):
        self.path, self.why = path, why
        super().__init__(f"--resume: {path} is damaged ({why}); start the run again in a new --out "
                         f"(nothing in {path.parent} was changed)")


def _shown(value: Any) -> str:
    """A value as a message shows it: JSON, cut to a few dozen characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _kind_names(kinds: tuple[type | None, ...]) -> str:
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "an object",
             list: "a list", None: "null"}
    return " or ".join(dict.fromkeys(names.get(k, getattr(k, "__name__", str(k))) for k in kinds))


def _is(value: Any, kinds: tuple[type | None, ...]) -> bool:
    if value is None:
        return None in kinds
    if isinstance(value, bool):  # True is an int to Python, not to a record's reader
        return bool in kinds
    return isinstance(value, tuple(k for k in kinds if k is not None))


def expect(path: Path, record: Any, required: dict[str, tuple[type | None, ...]],
           optional: dict[str, tuple[type | None, ...]] | None = None, where: str = "") -> dict:
    """``record`` itself when it is an object (a dict) holding every key of
    ``required``, and each key of ``required`` and ``optional`` it holds with
    a value of one of the listed types (None: null; an int is a number too,
    a bool is neither); else :class:`Damaged` naming the first key that is
    missing or wrong. ``where``: the record's place in the file, for the
    message ("loop", "line 3")."""
    label = f"{where}: " if where else ""
    if not isinstance(record, dict):
        raise Damaged(path, f"{label or 'its contents: '}{_shown(record)} is not an object")
    for key in required:
        if key not in record:
            raise Damaged(path, f"{label}no {key!r}")
    for key, kinds in {**required, **(optional or {})}.items():
        if key in record and not _is(record[key], kinds):
            raise Damaged(path, f"{label}{key!r} is {_shown(record[key])}, expected {_kind_names(kinds)}")
    return record


def expect_numbers(path: Path, mapping: dict, where: str) -> dict:
    """``mapping`` itself when every value in it is a number (seconds by
    phase, learning rates by group), else :class:`Damaged` naming the key."""
    for key, value in mapping.items():
        if not _is(value, NUMBER):
            raise Damaged(path, f"{where}: {key!r} is {_shown(value)}, expected a number")
    return mapping


def _why(e: BaseException) -> str:
    if isinstance(e, KeyError):
        return f"no {e.args[0]!r} where it is read" if e.args else "a key missing"
    if isinstance(e, UnicodeDecodeError):
        return "not text (UTF-8)"
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    text = text if len(text) <= 120 else text[:117] + "..."
    what = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return f"a value of another type or form ({what})" if isinstance(e, TypeError | ValueError) else what


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Interpret the record at ``path`` inside: whatever fails on its contents
    (a key missing, a value of another type or shape, a tensor of another
    size) is :class:`Damaged`, one line naming the file. A ConfigError that
    is no damage (a checkpoint of another config) passes through as it is."""
    try:
        yield
    except ConfigError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, RuntimeError, StopIteration,
            ZeroDivisionError, OverflowError) as e:
        raise Damaged(path, _why(e)) from None


def read_text(path: Path) -> str:
    """The text of the record at ``path``, or :class:`Damaged`: it cannot be read, or is not text."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise Damaged(path, "not text (UTF-8)") from None
    except OSError as e:
        raise Damaged(path, f"cannot be read: {e.strerror or e}") from None


def read_json(path: Path) -> Any:
    """The JSON record at ``path``; :class:`Damaged` when it is empty, cut
    short, not JSON, not text or unreadable."""
    text = read_text(path)
    if not text.strip():
        raise Damaged(path, "empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        cut = " (cut short?)" if e.pos >= len(text.rstrip()) else ""
        raise Damaged(path, f"not JSON: line {e.lineno} column {e.colno}: {e.msg}{cut}") from None
