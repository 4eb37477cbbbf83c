"""The shape of roofline/: imports in one direction only (module-level and
inside functions alike), small modules, short functions."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "roofline"
PKG = "dawnbench_fast.roofline"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80


def _imports(path: pathlib.Path) -> set[str]:
    """Sibling modules that ``path`` imports anywhere in its body."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PKG:
                found.update(a.name for a in node.names)
            elif node.module.startswith(PKG + "."):
                found.add(node.module.split(".")[2])
            elif node.module == "dawnbench_fast" and any(a.name == "roofline" for a in node.names):
                found.add("__init__")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(PKG + "."):
                    found.add(a.name.split(".")[2])
    return found - {path.stem}


def test_no_import_cycles():
    graph = {p.stem: _imports(p) for p in ROOT.glob("*.py")}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles: list[list[str]] = []

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for dep in sorted(graph.get(mod, ())):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[mod] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
    assert not cycles, cycles


def test_modules_and_functions_stay_small():
    too_long = []
    for path in sorted(ROOT.glob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.name}:{node.lineno} {node.name}: {n} lines")
    assert not too_long, too_long


def test_cost_tables_load_without_triton_or_the_extension():
    # the CLI on a machine without Triton or a built csrc still counts our ops
    import subprocess
    import sys

    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('triton', 'cupy') or name == 'dawnbench_fast._C':
            raise ImportError('blocked ' + name)
sys.meta_path.insert(0, Block())
from dawnbench_fast.roofline import registry
print(sum(o.startswith('dawnbench::') for o in registry.registered_ops()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) > 0
