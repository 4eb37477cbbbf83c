"""README.md and the package's code stand alone: a reader with only
this repository finds everything they cite. No path that leaves the
repository (``../shared/...``, a machine's work or home folders) and no
Markdown file that the repository does not hold (a bare ``DESIGN.md`` that
lived beside the checkout). Outside facts live in docs/FACTS.md with their
sources; tests and CI may still read the data set beside the checkout.

Docstrings and comments are plain text in the file, so scanning whole files
covers them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The folders whose files ship as the package (pyproject's
# [tool.setuptools.package-dir]; checked below) and the suffixes of its code.
PACKAGE_FOLDERS = ("dawnbench_fast", "kernels", "roofline", "csrc")
CODE_SUFFIXES = {".py", ".cpp", ".h", ".hpp", ".cu", ".cuh"}
SKIP_DIRS = {"__pycache__", "build", "dist", "runs", "node_modules"}

# URLs are removed first: a web address may contain /home/ or ../ legitimately.
_URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_TAIL = r"[^\s'\"`),;\]]*"  # the rest of the path, so the message shows all of it
_OUTSIDE = [
    # Relative paths here are written from the repository root (docs/FACTS.md,
    # csrc/README.md), so one that starts by climbing out leaves the repository.
    (re.compile(r"(?<![\w.])\.\.[/\\]" + _TAIL), "climbs out of the repository"),
    (re.compile(r"(?<![\w.-])/work/" + _TAIL), "a machine's work folder"),
    (re.compile(r"(?<![\w.-])/(?:home|Users)/[\w.-]+" + _TAIL), "someone's home folder"),
    (re.compile(r"(?<![\w.-])/root(?:/|\b)" + _TAIL), "root's home folder"),
    (re.compile(r"\b[A-Za-z]:\\Users\\" + _TAIL), "someone's home folder"),
]
_MARKDOWN = re.compile(r"(?<![\w/.-])([\w./-]*\w\.md)\b")
# A folder named by an upper-case stand-in (DIR/, OUT/): the reader supplies it.
_PLACEHOLDER_FOLDER = re.compile(r"^[A-Z][A-Z_]*/")


def outside_references(text: str) -> list[tuple[int, str, str]]:
    """(line number, the offending text, why) for every path in ``text`` that
    points outside the repository."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        bare = _URL.sub(" ", line)
        for pattern, why in _OUTSIDE:
            found += [(number, m.group(0), why) for m in pattern.finditer(bare)]
    return found


def markdown_files(root: Path) -> set[str]:
    """Paths (relative to ``root``, with '/') of the Markdown files the
    repository holds, build outputs and hidden folders (a venv, .git) aside."""
    out = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs
                   if not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info")]
        rel = Path(folder).relative_to(root)
        out.update((rel / f).as_posix() for f in files if f.endswith(".md"))
    return out


def missing_markdown(text: str, where: Path, root: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line number, name) for every Markdown file ``text`` names that is not in
    ``known``: resolved from the repository root or from the file's folder
    (``where``, relative to root); a bare name may be any file of that name."""
    basenames = {Path(k).name for k in known}
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for name in _MARKDOWN.findall(_URL.sub(" ", line)):
            name = name.removeprefix("./")
            if _PLACEHOLDER_FOLDER.match(name):  # a file the reader's command writes: DIR/sweep.md
                continue
            candidates = {name, os.path.normpath((where / name).as_posix()).replace(os.sep, "/")}
            if candidates & known or ("/" not in name and name in basenames):
                continue
            found.append((number, name))
    return found


def scan(root: Path, folders: tuple[str, ...] = PACKAGE_FOLDERS) -> list[str]:
    """Every problem in ``root``'s README.md and the code files of ``folders``,
    one line each: 'path:line: text (why)'."""
    known = markdown_files(root)
    files = [root / "README.md"]
    for folder in folders:
        for dirpath, dirs, names in os.walk(root / folder):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS]
            files += [Path(dirpath) / n for n in names if Path(n).suffix in CODE_SUFFIXES]
    problems = []
    for path in sorted(files):
        rel = path.relative_to(root)
        text = path.read_text(encoding="utf-8", errors="replace")
        problems += [f"{rel}:{n}: {s} ({why})" for n, s, why in outside_references(text)]
        problems += [f"{rel}:{n}: {s} (no such Markdown file in the repository)"
                     for n, s in missing_markdown(text, rel.parent, root, known)]
    return problems


def test_readme_and_package_code_point_only_inside_the_repository():
    problems = scan(ROOT)
    assert not problems, "outside references (move the facts into docs/):\n" + "\n".join(problems)


@pytest.mark.parametrize("text", [
    "Rules (../shared/DESIGN.md):",
    "facts (../shared/ANCHORS.md, 'Kernels')",
    "data at /work/shared/data/cifar10",
    "# see /home/alice/notes.txt",
    "cache = '/root/.cache/x'",
    "open('/Users/bob/x')",
    r"C:\Users\carol\x",
    "#include \"..\\outside.h\"",
])
def test_the_checker_flags_a_planted_outside_path(text):
    assert outside_references(text), text


@pytest.mark.parametrize("text", [
    "see docs/FACTS.md, 'Kernel design'",
    "[hiverge](https://github.com/hiverge/home/../x)",
    "else ``~/.cache/dawnbench_fast``",
    "CUDA_HOME, then /usr/local/cuda",
    "from ..data import augment",
    "Path(__file__).parent / '..'",
    "tmp = '/tmp/x'; a = b/root",
])
def test_the_checker_passes_what_stays_inside(text):
    assert not outside_references(text), text


def test_missing_markdown_names():
    known = {"README.md", "docs/FACTS.md", "docs/PERFORMANCE.md"}
    text = "DESIGN.md\ndocs/FACTS.md and PERFORMANCE.md\nsee FACTS.md (docs/NOPE.md)\n"
    assert missing_markdown(text, Path("."), ROOT, known) == [(1, "DESIGN.md"), (3, "docs/NOPE.md")]
    assert missing_markdown("writes DIR/sweep.md and OUT/x.md", Path("."), ROOT, known) == []
    # from a file in docs/, a name relative to its own folder resolves too
    assert missing_markdown("PERFORMANCE.md ../README.md", Path("docs"), ROOT, known) == []


def test_scan_finds_references_planted_in_files(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "FACTS.md").write_text("facts\n")
    (tmp_path / "README.md").write_text("See docs/FACTS.md.\n")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "ok.py").write_text('"""Facts: docs/FACTS.md."""\n')
    (pkg / "notes.txt").write_text("../shared/DESIGN.md\n")  # not code: not scanned
    assert scan(tmp_path, ("pkg",)) == []
    (pkg / "bad.py").write_text('"""Rules (../shared/DESIGN.md)."""\n')
    (pkg / "bad.cuh").write_text("// see DESIGN.md\n")
    (tmp_path / "README.md").write_text("See /work/shared/ANCHORS.md.\n")
    problems = scan(tmp_path, ("pkg",))
    assert any(p.startswith("README.md:1: /work/") for p in problems), problems
    assert any(p.startswith("pkg/bad.py:1: ../") for p in problems), problems
    assert any(p.startswith("pkg/bad.cuh:1: DESIGN.md") for p in problems), problems


def test_package_folders_are_pyprojects():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert set(config["tool"]["setuptools"]["package-dir"].values()) == set(PACKAGE_FOLDERS)
