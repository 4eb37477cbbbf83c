"""Every repository path the docs and the docstrings cite exists.

A "cited path" is a token in the text that names a place in this repository:

- a token that starts with one of the repository's top-level folders
  (``dawnbench_fast/``, ``kernels/``, ``csrc/``, ``roofline/``, ``tools/``,
  ``tests/``, ``benchmarks/``, ``docs/``, ``.ci/``), in prose, in backticks, in a code
  block or as a link, resolved from the repository root (the docs' own
  convention: docs/FACTS.md);
- a token that starts with a subpackage of ``dawnbench_fast/`` (``models/``,
  ``optim/``, ``data/``, ``analyze/``, ...) and names a source file
  (``models/cifar_net.py``), resolved inside ``dawnbench_fast/``;
- a top-level file named in backticks (pyproject.toml, setup.py, LICENSE);
- a Markdown link target (``[text](target)``) that is no URL, resolved from
  the linking file's folder, as a Markdown viewer resolves it.

Skipped: tokens with a placeholder (``<op>``, ``*``, ``{a,b}``, ``$VAR``,
``...``, a range such as ``seed0..2``, an upper-case stand-in such as ``DIR``,
``PATH`` or ``bench_X.py``), and everything under docs/journal/, whose paths
are historical (the journal records what was true then).

Scanned: README.md and docs/*.md; the module, class and
function docstrings of the Python files in the package's folders
(dawnbench_fast/, kernels/, csrc/, roofline/) and in the measuring tools'
(tools/).
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_FOLDERS = ("dawnbench_fast", "kernels", "csrc", "roofline", "tools", "tests", "benchmarks", "docs", ".ci")
TOP_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "MANIFEST.in", "LICENSE", ".gitignore")
# Subpackages of dawnbench_fast/ that docstrings and docs name without the
# prefix. The fixed names stay checked after a move (a citation of the old
# place is then reported); folders that appear later are added at run time.
SUBPACKAGES = ("models", "optim", "data", "analyze")
SOURCE_SUFFIXES = (".py", ".cpp", ".h", ".hpp", ".cu", ".cuh", ".md", ".json", ".toml")
PACKAGE_FOLDERS = ("dawnbench_fast", "kernels", "csrc", "roofline")
SCANNED_FOLDERS = (*PACKAGE_FOLDERS, "tools")  # whose docstrings are read
SKIP_DIRS = {"__pycache__", "build", "dist", "runs", "node_modules"}
# Upper-case words that stand for a value the reader supplies.
PLACEHOLDER_WORDS = {"X", "N", "NN", "NNNN", "S", "DIR", "PATH", "OUT", "FILE", "FOLDER", "NAME",
                     "TRACE", "CSV", "OP", "TASK", "METHOD", "SEED", "HOST"}
PLACEHOLDER_CHARS = set("<>*{}$?[]|")
# Citations that do not resolve today and cannot be mended from the docs side
# (docstrings are code, owned elsewhere), or files another change is adding.
# Each entry is 'where: path'. Remove an entry when its file exists or its
# citation is mended; the test fails on an entry that no longer occurs, so the
# list never hides a stale exception.
KNOWN_MISSING: set[str] = set()  # every cited path exists; add one here only with a reason

_URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+|\bwww\.\S+", re.IGNORECASE)
_STOP = r"[^\s`'\"(),;|]*"  # the token's rest: up to a space, quote, backtick, bracket or separator
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _prefix_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(r"(?<![\w./~\\-])(?:" + alternatives + ")/" + _STOP)


def _clean(token: str) -> str:
    """The path part of a token: no line number or test id (``x.py:12``,
    ``x.py::test``), no anchor, no trailing sentence punctuation."""
    token = token.split("::")[0]
    token = re.sub(r":\d+(?::\d+)?$", "", token)
    token = token.split("#")[0]
    return token.rstrip(".:!]")


def is_placeholder(token: str) -> bool:
    # ".." not followed by "/" is a range or an ellipsis (seed0..2, ...); "../"
    # in a link climbs to the parent folder and is resolved like any link
    if PLACEHOLDER_CHARS & set(token) or re.search(r"\.\.(?!/)", token):
        return True
    words = re.split(r"[/._=-]+", token)
    return any(w in PLACEHOLDER_WORDS for w in words)


def cited_paths(text: str, subpackages: tuple[str, ...] = SUBPACKAGES) -> list[tuple[int, str, str]]:
    """(line, token, how to resolve it) for each repository path ``text``
    cites; how is 'root', 'package' (inside dawnbench_fast/) or 'link'
    (from the citing file's folder). Placeholders are left out."""
    root_re = _prefix_pattern(TOP_FOLDERS)
    package_re = _prefix_pattern(tuple(subpackages))
    file_re = re.compile("`(" + "|".join(re.escape(f) for f in TOP_FILES) + ")`")
    found: list[tuple[int, str, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        for target in _LINK.findall(line):
            if _URL.match(target) or target.startswith(("#", "mailto:")):
                continue
            target = _clean(target)
            if target and not is_placeholder(target):
                found.append((number, target, "link"))
        bare = _URL.sub(" ", _LINK.sub("]", line))
        for m in root_re.finditer(bare):
            token = _clean(m.group(0))
            if token and not is_placeholder(token):
                found.append((number, token, "root"))
        for m in package_re.finditer(bare):
            token = _clean(m.group(0))
            # a source file, not a folder word ("data/" in prose) nor another
            # project's file (an ImageNet devkit's data/meta.mat)
            if token.endswith(SOURCE_SUFFIXES) and not is_placeholder(token):
                found.append((number, token, "package"))
        found += [(number, m.group(1), "root") for m in file_re.finditer(bare)]
    return found


def resolve(token: str, how: str, where: Path, root: Path) -> Path:
    if how == "package":
        return root / "dawnbench_fast" / token
    if how == "link":
        return root / where / token
    return root / token


def subpackages(root: Path) -> tuple[str, ...]:
    package = root / "dawnbench_fast"
    found = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()} \
        if package.is_dir() else set()
    return tuple(sorted(set(SUBPACKAGES) | found))


def missing_in_text(text: str, rel: Path, root: Path, subs: tuple[str, ...]) -> list[str]:
    """'rel:line: token' for each cited path of ``text`` (the file ``rel``,
    relative to ``root``) that does not exist."""
    out = []
    for number, token, how in cited_paths(text, subs):
        if not resolve(token, how, rel.parent, root).exists():
            out.append(f"{rel.as_posix()}:{number}: {token}")
    return out


def doc_files(root: Path) -> list[Path]:
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


def docstrings(source: str) -> list[tuple[int, str]]:
    """(first line, text) of the module's, classes' and functions' docstrings."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                found.append((body[0].lineno, body[0].value.value))
    return found


def python_files(root: Path, folders: tuple[str, ...] = PACKAGE_FOLDERS) -> list[Path]:
    files = []
    for folder in folders:
        for dirpath, dirs, names in os.walk(root / folder):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS]
            files += [Path(dirpath) / n for n in names if n.endswith(".py")]
    return sorted(files)


def scan(root: Path, folders: tuple[str, ...] = SCANNED_FOLDERS) -> list[str]:
    """Every cited path of the docs and the docstrings under ``root`` that does
    not exist, one 'where: path' line each (a docstring's line is the line its
    text starts on plus the line inside it)."""
    subs = subpackages(root)
    problems = []
    for path in doc_files(root):
        if path.exists():
            problems += missing_in_text(path.read_text(encoding="utf-8"), path.relative_to(root), root, subs)
    for path in python_files(root, folders):
        rel = path.relative_to(root)
        for start, text in docstrings(path.read_text(encoding="utf-8")):
            for line in missing_in_text(text, rel, root, subs):
                where, token = line.rsplit(": ", 1)
                number = int(where.rsplit(":", 1)[1])
                problems.append(f"{rel.as_posix()}:{start + number - 1}: {token}")
    return problems


def _key(problem: str) -> str:
    """'where: path' without the line number, so that edits above a citation
    do not churn KNOWN_MISSING."""
    where, token = problem.rsplit(": ", 1)
    return f"{where.rsplit(':', 1)[0]}: {token}"


def test_every_cited_path_exists():
    problems = scan(ROOT)
    unexpected = [p for p in problems if _key(p) not in KNOWN_MISSING]
    assert not unexpected, ("cited paths that do not exist (mend the citation, or the file moved):\n"
                            + "\n".join(unexpected))


def test_known_missing_is_still_missing():
    # an entry whose citation was mended or whose file appeared must leave the list
    current = {_key(p) for p in scan(ROOT)}
    stale = sorted(KNOWN_MISSING - current)
    assert not stale, "KNOWN_MISSING entries that now resolve; remove them:\n" + "\n".join(stale)


@pytest.mark.parametrize("text, expected", [
    ("see csrc/bn_act_math.cuh.", [(1, "csrc/bn_act_math.cuh", "root")]),
    ("`python -m pytest tests/ops/test_bn_act.py::test_x -k y`", [(1, "tests/ops/test_bn_act.py", "root")]),
    ("[the layout](docs/ARCHITECTURE.md#layout)", [(1, "docs/ARCHITECTURE.md", "link")]),
    ("Details: [csrc/README.md](../csrc/README.md).",
     [(1, "../csrc/README.md", "link"), (1, "csrc/README.md", "root")]),
    ("(models/conv_cpu.py, line 3)", [(1, "models/conv_cpu.py", "package")]),
    ("`pyproject.toml` lists them", [(1, "pyproject.toml", "root")]),
    ("at dawnbench_fast/cifar.py:120 and .ci/run",
     [(1, "dawnbench_fast/cifar.py", "root"), (1, ".ci/run", "root")]),
    ("kernels/ never import models/ or optim/", [(1, "kernels/", "root")]),
])
def test_the_extractor_finds_paths(text, expected):
    assert cited_paths(text) == expected


@pytest.mark.parametrize("text", [
    "kernels/<op>.py and tests/ops/test_<op>.py",
    "docs/results/cpu-seed*/run.json",
    "`--out DIR` then docs/results/compare-8p5ep/ours-seed0..2",
    "python benchmarks/bench_X.py --flags",
    "runs/cifar10/<run>/run.json, ../shared/data/cifar10, ~/.cache/dawnbench_fast/x.json",
    "https://github.com/x/y/blob/main/csrc/nothing.cu",
    "from ..data import augment; pyproject.toml without backticks",
    "the data/ folder",
])
def test_the_extractor_skips_what_is_no_path(text):
    assert cited_paths(text) == []


def test_scan_catches_a_renamed_file(tmp_path):
    # a made-up repository: a doc and a docstring cite files; one is renamed
    (tmp_path / "docs").mkdir()
    (tmp_path / "csrc").mkdir()
    (tmp_path / "dawnbench_fast" / "models").mkdir(parents=True)
    (tmp_path / "dawnbench_fast" / "models" / "__init__.py").write_text("")
    (tmp_path / "csrc" / "bn_act.cu").write_text("")
    (tmp_path / "csrc" / "ops.py").write_text('"""Launches csrc/bn_act.cu;\nsee models/conv.py."""\n')
    (tmp_path / "dawnbench_fast" / "models" / "conv.py").write_text("")
    (tmp_path / "README.md").write_text("See [perf](docs/PERF.md) and `csrc/bn_act.cu`.\n")
    (tmp_path / "docs" / "PERF.md").write_text("Back to [the README](../README.md).\n")
    assert scan(tmp_path) == []
    (tmp_path / "csrc" / "bn_act.cu").rename(tmp_path / "csrc" / "bn_act_kernel.cu")
    (tmp_path / "dawnbench_fast" / "models" / "conv.py").unlink()
    (tmp_path / "docs" / "PERF.md").rename(tmp_path / "docs" / "PERFORMANCE.md")
    assert scan(tmp_path) == ["README.md:1: docs/PERF.md", "README.md:1: csrc/bn_act.cu",
                              "csrc/ops.py:1: csrc/bn_act.cu", "csrc/ops.py:2: models/conv.py"]


def test_the_journal_is_not_scanned(tmp_path):
    (tmp_path / "docs" / "journal").mkdir(parents=True)
    (tmp_path / "README.md").write_text("nothing cited\n")
    (tmp_path / "docs" / "journal" / "2026-01-01-old.md").write_text("csrc/gone.cu\n")
    assert scan(tmp_path) == []
