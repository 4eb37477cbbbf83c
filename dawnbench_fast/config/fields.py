"""``--list-fields``: every field of a recipe dataclass with its type, default
and a one-line description, so that ``--set NAME=VALUE`` and ``--show-config``
can be read without opening the source.

The descriptions are the recipe's own comments (the recipe modules document
each field where it is declared, and a second copy in field metadata would
drift from them): a field's trailing ``# comment``, else the block of ``#``
lines right above it. tests/config/test_field_listing.py checks that every
field of both trainers has one.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import json
import textwrap
import tokenize
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldDoc:
    """One recipe field as ``--list-fields`` shows it."""

    name: str
    type: str  # as declared: "float", "tuple[int, int, int]", "str | None"
    default: Any
    description: str  # "" where the source has no comment for it


def field_docs(config_type: type) -> list[FieldDoc]:
    """Every field of the dataclass ``config_type``, in declaration order."""
    comments: dict[str, str] = {}
    # a subclass's comment wins over its base's (the MRO walked base first)
    for klass in reversed(config_type.__mro__):
        if dataclasses.is_dataclass(klass) and "__annotations__" in vars(klass):
            comments.update(_comments_of(klass))
    return [FieldDoc(f.name, _type_name(f.type), _default(f), comments.get(f.name, ""))
            for f in dataclasses.fields(config_type)]


def listing(cfg: Any, frozen: tuple[str, ...] = ("extra",)) -> str:
    """The text ``--list-fields`` prints for config ``cfg``: each field as
    ``name: type = default``, the value this command line resolves to where
    it differs (a named recipe, a flag, --set), then its description."""
    lines = [*textwrap.wrap("Recipe fields: set any with --set NAME=VALUE (tuples as 1,2,3; booleans as "
                            "true/false; none for no value); --show-config prints the resolved values.",
                            width=100), ""]
    for doc in field_docs(type(cfg)):
        head = f"{doc.name}: {doc.type} = {_shown(doc.default)}"
        now = getattr(cfg, doc.name)
        if now != doc.default:
            head += f"   (this command: {_shown(now)})"
        if doc.name in frozen:
            head += "   (not settable with --set)"
        lines.append(head)
        lines += textwrap.wrap(doc.description, width=96, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) if value else "()"
    if value is None:
        return "none"  # what --set takes for it
    return json.dumps(value) if isinstance(value, str | bool | dict) else str(value)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _type_name(declared: Any) -> str:
    # annotations are strings under `from __future__ import annotations`
    return declared if isinstance(declared, str) else getattr(declared, "__name__", str(declared))


def _comments_of(klass: type) -> dict[str, str]:
    """Field name -> its comment in ``klass``'s own source."""
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):  # no source (a frozen app): the listing says no more than the types
        return {}
    by_line: dict[int, str] = {}  # line number -> comment text on that line
    whole_line: set[int] = set()  # lines that hold nothing but a comment
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            by_line[tok.start[0]] = tok.string.lstrip("#").strip()
            if not tok.line[:tok.start[1]].strip():
                whole_line.add(tok.start[0])
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    out = {}
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        end = node.end_lineno or node.lineno
        trailing = " ".join(by_line[n] for n in range(node.lineno, end + 1) if n in by_line)
        out[node.target.id] = trailing or _block_above(node.lineno, by_line, whole_line)
    return out


def _block_above(line: int, by_line: dict[int, str], whole_line: set[int]) -> str:
    """The comment lines right above ``line``, joined; a section rule such as
    ``# -- data ---`` ends the block (it names a group, not the field)."""
    texts: list[str] = []
    n = line - 1
    while n in whole_line and not by_line[n].startswith("--"):
        texts.insert(0, by_line[n])
        n -= 1
    return " ".join(texts)
