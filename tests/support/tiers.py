"""The test tiers (pyproject's markers ``build`` and ``e2e``) and the check
that the default tier, which leaves both out, still imports every module
of the package.

- :func:`file_tiers` reads a test file's module-level ``pytestmark`` without
  importing it, so that the default tier need not import a file whose tests
  are all in other tiers (tests/conftest.py's ``pytest_ignore_collect``): what
  such a file imports would otherwise count as covered.
- :func:`package_modules` lists the package's modules from the source folders
  as pyproject installs them (``kernels/`` as ``dawnbench_fast.kernels`` ...).
- :func:`uncovered` says which of them a run did not import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIERS = ("build", "e2e")
# the expression the default tier runs (pyproject's addopts)
DEFAULT_EXPRESSION = "not build and not e2e"
# Source folder -> the package it is installed as (pyproject's package-dir).
PACKAGES = {
    "dawnbench_fast": "dawnbench_fast",
    "kernels": "dawnbench_fast.kernels",
    "roofline": "dawnbench_fast.roofline",
    "csrc": "dawnbench_fast.csrc",
}


def package_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the package."""
    out: dict[str, Path] = {}
    for folder, package in PACKAGES.items():
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def _mark_names(node: ast.expr) -> set[str]:
    """``pytest.mark.NAME`` (called or not), or a list or tuple of them: the NAMEs."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return set().union(*(_mark_names(e) for e in node.elts)) if node.elts else set()
    if isinstance(node, ast.Call):
        node = node.func
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
            and node.value.attr == "mark"):
        return {node.attr}
    return set()


def file_tiers(path: Path) -> set[str]:
    """The tiers a test file's module-level ``pytestmark`` puts all its tests in."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (OSError, SyntaxError, ValueError):  # pytest's own collection reports it
        return set()
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets):
            found |= _mark_names(node.value)
    return found & set(TIERS)


def uncovered(imported: Iterable[str], modules: Iterable[str]) -> list[str]:
    """The ``modules`` not among ``imported`` (sys.modules' names), sorted. The
    commands' ``__main__`` modules are left out: they exit when imported, and the
    tests start them as ``python -m ...`` (tests/runner/test_stop_at_start_up.py)."""
    seen = set(imported)
    return sorted(m for m in modules if m not in seen and not m.endswith(".__main__"))


def message(missing: list[str]) -> str:
    """What a whole default-tier run says when it left modules unimported."""
    return (f"{len(missing)} module(s) of the package that no test of the default tier imports "
            f"(`python -m pytest` leaves out the build and e2e tiers): {', '.join(missing)}. "
            "Give each a test that runs without compilers and without a whole training run "
            "(docs/ARCHITECTURE.md, \"Testing\").")
