"""The shape of the house (issues 8 and 29): no import cycles, the lowest
floors do not import the kernels, kernels/ and csrc/ do not import the model
or the optimiser, and no module or function grows past what a reader holds.

Imports are read from the source with ``ast`` (module level and inside
functions alike), so an import hidden in a function to dodge a cycle at import
time still counts as the dependency it is.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Source folder -> the package it is installed as (pyproject's package-dir).
PACKAGES = {
    "dawnbench_fast": "dawnbench_fast",
    "kernels": "dawnbench_fast.kernels",
    "roofline": "dawnbench_fast.roofline",
    "csrc": "dawnbench_fast.csrc",
}
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the package."""
    out: dict[str, Path] = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


MODULES = _modules()


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if path.name == "__init__.py" else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path) -> set[str]:
    """The package's own modules that ``module`` imports, anywhere in its body."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path, node)
            # `from pkg import mod` imports the submodule pkg.mod when it is one
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target
                     for a in node.names]
        for name in names:
            # the longest prefix that is one of our modules
            parts = name.split(".")
            for k in range(len(parts), 0, -1):
                cand = ".".join(parts[:k])
                if cand in MODULES:
                    if cand != module:
                        found.add(cand)
                    break
    return found


def _graph() -> dict[str, set[str]]:
    """Import edges between our modules. A package's ``__init__`` is a module
    like any other: a submodule importing a name from its own package's
    ``__init__`` that imports the submodule back is a real cycle."""
    return {m: _imports(m, p) for m, p in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_walker_sees_imports_inside_functions(tmp_path):
    # guards the test itself: an import inside a function, relative or absolute, is an edge
    src = tmp_path / "fake.py"
    src.write_text("def f():\n    from dawnbench_fast import dispatch\n    from . import bench\n"
                   "    import dawnbench_fast.kernels.launches as l\n")
    assert _imports("dawnbench_fast.fake", src) == {
        "dawnbench_fast.dispatch", "dawnbench_fast.bench", "dawnbench_fast.kernels.launches"}


def test_cycle_finder_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("floor", ["dawnbench_fast.models", "dawnbench_fast.optim",
                                   "dawnbench_fast.vocabulary", "dawnbench_fast.data"])
def test_lower_floors_do_not_import_kernels(floor):
    graph = _graph()
    bad = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items() if m == floor or m.startswith(floor + ".")
        for t in targets
        if t.startswith(("dawnbench_fast.kernels", "dawnbench_fast.csrc"))
    )
    assert not bad, "the model, optimiser and data floors must not import kernels/ or csrc/: " + \
        ", ".join(bad)


KERNEL_FLOORS = ("dawnbench_fast.kernels", "dawnbench_fast.csrc")
MODEL_FLOORS = ("dawnbench_fast.models", "dawnbench_fast.optim")


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _upward_imports(graph: dict[str, set[str]], importers: tuple[str, ...],
                    forbidden: tuple[str, ...]) -> list[str]:
    """Edges from a module of ``importers`` to one of ``forbidden``."""
    return sorted(f"{m} -> {t}" for m, targets in graph.items() if _in(m, importers)
                  for t in targets if _in(t, forbidden))


def test_kernels_and_csrc_do_not_import_models_or_optimizers():
    # an op's kernels (Triton or C++/CPU) take the model's modules as arguments
    # (duck typing); the model looks its ops up through dawnbench_fast.dispatch
    bad = _upward_imports(_graph(), KERNEL_FLOORS, MODEL_FLOORS)
    assert not bad, "kernels/ and csrc/ never import the model or the optimizer: " + ", ".join(bad)


def test_the_layer_check_catches_a_planted_violation():
    graph = {"dawnbench_fast.csrc.conv_group": {"dawnbench_fast.models.layers", "dawnbench_fast.dispatch"},
             "dawnbench_fast.kernels.gemm": {"dawnbench_fast.optim.muon"},
             "dawnbench_fast.models.layers": {"dawnbench_fast.dispatch"},
             "dawnbench_fast.csrc_extra": {"dawnbench_fast.models_extra"}}
    assert _upward_imports(graph, KERNEL_FLOORS, MODEL_FLOORS) == [
        "dawnbench_fast.csrc.conv_group -> dawnbench_fast.models.layers",
        "dawnbench_fast.kernels.gemm -> dawnbench_fast.optim.muon"]


def test_no_module_over_the_line_limit():
    files = list(MODULES.values()) + sorted((ROOT / "tests").rglob("*.py")) + \
        sorted((ROOT / "benchmarks").rglob("*.py"))
    long = {str(p.relative_to(ROOT)): n for p in files
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def _is_kernel(fn: ast.FunctionDef) -> bool:
    """Triton kernels (@triton.jit, @triton.autotune ...) are exempt: one
    kernel is one unit of GPU code and splitting it costs registers."""
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if "triton" in ast.unparse(target):
            return True
    return False


def test_no_function_over_the_line_limit():
    long = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not _is_kernel(node):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"
