"""The built wheel ships dawnbench_fast and its mapped subpackages, and no
top-level `kernels` (that name belongs to a PyPI package); the project's
measuring tools (tools/, beside the package) are not in it, the package never
imports them, and they import only the package's public names."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import dawnbench_fast

ROOT = Path(__file__).resolve().parents[1]
# The source folders the wheel installs (pyproject's package-dir): dawnbench_fast and its mapped parts.
PACKAGE_FOLDERS = ("dawnbench_fast", "kernels", "csrc", "roofline")
TOOLS = "tools"
# Where the measuring tools lived inside the package before they moved to tools/: none may come back.
MOVED_OUT = ("dawnbench_fast/gpu_suite/", "dawnbench_fast/cifar/step_timing.py",
             "dawnbench_fast/cifar/step_arms.py", "dawnbench_fast/cifar/step_kernels.py",
             "dawnbench_fast/analyze/results.py", "dawnbench_fast/analyze/result_files.py")
# What a user runs, which the wheel must hold: the trainers, the kernels, the roofline, the analyses.
PRODUCT = ("dawnbench_fast/cifar/__main__.py", "dawnbench_fast/cifar/task.py",
           "dawnbench_fast/imagenet/__main__.py", "dawnbench_fast/training/train.py",
           "dawnbench_fast/kernels/bn_act.py", "dawnbench_fast/kernels/conv_group.py",
           "dawnbench_fast/csrc/bn_act.py", "dawnbench_fast/roofline/__main__.py",
           "dawnbench_fast/roofline/report.py", "dawnbench_fast/analyze/__main__.py",
           "dawnbench_fast/analyze/leaderboard.py", "dawnbench_fast/kernel_winners.py",
           "dawnbench_fast/reporting/provenance.py")

pytestmark = pytest.mark.build


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built once with the installed setuptools (as CI's set-up has it).
    Its build folders are fresh ones outside the checkout: setuptools never
    empties build/lib, so a file copied there by an earlier build (a module
    since moved or removed) would otherwise ride along into every wheel."""
    out = tmp_path_factory.mktemp("wheel")
    fresh = out / "setup-extra.cfg"  # read by setuptools (distutils) on top of the project's own settings
    fresh.write_text(f"[build]\nbuild_base = {out / 'build'}\n[egg_info]\negg_base = {out}\n")
    # pure-Python wheel: fast, no compilers
    env = {**os.environ, "DAWNBENCH_NO_EXT": "1", "DIST_EXTRA_CONFIG": str(fresh)}
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
         "-w", str(out), "-q"],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (built,) = out.glob("dawnbench_fast-*.whl")
    return built


def test_wheel_has_no_top_level_kernels(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (top,) = [n for n in names if n.endswith("top_level.txt")]
        assert z.read(top).decode().split() == ["dawnbench_fast"]
    assert not [n for n in names if n.startswith(("kernels/", "roofline/", "csrc/"))]
    # every package pyproject lists (the folders of the grouped top floor included)
    block = re.search(r"^packages = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.M | re.S)
    listed = re.findall(r'"([\w.]+)"', block.group(1))
    assert "dawnbench_fast.csrc" in listed and "dawnbench_fast.cifar" in listed
    for package in listed:
        assert f"{package.replace('.', '/')}/__init__.py" in names, package
    assert "dawnbench_fast/analyze/cifar10_records.json" in names  # analyze leaderboard reads it
    assert "dawnbench_fast/kernel_winners.json" in names  # --kernels auto reads it on a GPU
    assert "dawnbench_fast/cifar/task.py" in names and "dawnbench_fast/csrc/engine.py" in names
    cu = [n for n in names if n.startswith("dawnbench_fast/csrc/") and n.endswith(".cu")]
    sources = list((ROOT / "csrc").glob("*.cu"))
    assert len(cu) == len(sources)  # the run-time CUDA path needs the sources


def test_wheel_metadata(wheel):
    """One version (the package's), the SPDX licence with its file, Pillow and
    the tensorboard extra declared, a console script for each ``python -m``
    entry, and no made-up project URL."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        scripts = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    head = meta.split("\n\n")[0]
    assert f"\nVersion: {dawnbench_fast.__version__}\n" in head
    assert "\nLicense-Expression: MIT\n" in head and "\nLicense-File: LICENSE\n" in head
    assert not re.search(r"^License: ", head, re.M)  # the deprecated table form
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert re.search(r"^Requires-Dist: Pillow>=", head, re.M)
    assert 'Requires-Dist: tensorboard>=2.10; extra == "tensorboard"' in head
    assert "Project-URL" not in head  # none until the project has a real address
    for entry in ("cifar", "imagenet", "roofline", "analyze"):
        assert re.search(rf"^dawnbench-{entry} = dawnbench_fast\.{entry}\.", scripts, re.M), entry
    assert not re.search(r'^version = "', (ROOT / "pyproject.toml").read_text(), re.M)


def test_the_wheel_holds_the_product_and_no_measuring_tool(wheel):
    """What a user runs is in the wheel; the measuring tools are not, under
    tools/ or at their old places in the package. Every Python file of the
    package's source folders is in it, and no other."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert not [n for n in names if n.startswith(f"{TOOLS}/")]
    assert not [n for n in names if n.startswith(MOVED_OUT)]
    assert [m for m in PRODUCT if m not in names] == []
    # kernels/x.py is dawnbench_fast/kernels/x.py in the wheel (package-dir)
    sources = {p.relative_to(ROOT).as_posix() if p.is_relative_to(ROOT / "dawnbench_fast")
               else f"dawnbench_fast/{p.relative_to(ROOT).as_posix()}"
               for p in _python_files(*PACKAGE_FOLDERS)}
    assert {n for n in names if n.endswith(".py")} == sources


def test_pyproject_installs_the_package_alone():
    """pyproject.toml names dawnbench_fast and its subpackages only (listed, or,
    with automatic discovery, included by ``dawnbench_fast*`` alone)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = setuptools["packages"]
    names = packages["find"].get("include", []) if isinstance(packages, dict) else packages
    assert names and all(n.split(".")[0] in ("dawnbench_fast", "dawnbench_fast*") for n in names), names
    assert all(_under(n, "dawnbench_fast") for n in setuptools.get("package-dir", {}))


def _imports(tree: ast.AST) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of each absolute import in ``tree``, at module
    level or inside a function: ``import a.b`` is (n, "a.b", None), ``from a
    import b, c`` is (n, "a", "b") and (n, "a", "c"); a call
    ``importlib.import_module("a.b")`` with a literal name is (n, "a.b", None)."""
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, node.module, a.name) for a in node.names]
        elif (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module") and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value, None))
    return sorted(found, key=lambda f: f[0])  # by line (ast.walk goes breadth first)


def _private(part: str) -> bool:
    """A name a module keeps to itself: a leading underscore (a dunder such
    as ``__version__`` or ``__main__`` is public)."""
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def private_names_imported(source: str, where: str = "<source>") -> list[str]:
    """'where:line: module[.name]' for each private name of dawnbench_fast
    that ``source`` imports: a module or a name whose part starts with ``_``."""
    bad = []
    for line, module, name in _imports(ast.parse(source)):
        parts = module.split(".") + ([name] if name else [])
        if _under(module, "dawnbench_fast") and any(_private(p) for p in parts):
            bad.append(f"{where}:{line}: {'.'.join(parts)}")
    return bad


def tools_imported(source: str, where: str = "<source>") -> list[str]:
    """'where:line: module' for each import of the measuring tools in ``source``."""
    return list(dict.fromkeys(f"{where}:{line}: {module}" for line, module, _ in _imports(ast.parse(source))
                              if _under(module, TOOLS)))  # once per import, however many names it takes


def _python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py")
                  if "__pycache__" not in p.parts)


def test_the_tools_import_only_the_package_s_public_names():
    files = _python_files(TOOLS)
    assert any(p.name == "suite.py" for p in files)  # the tools were found
    bad = [b for p in files for b in private_names_imported(p.read_text(), p.relative_to(ROOT).as_posix())]
    assert not bad, "tools/ imports names the package keeps to itself (make them public there):\n" + \
        "\n".join(bad)


def test_the_package_never_imports_the_tools():
    files = _python_files(*PACKAGE_FOLDERS)
    assert any(p.name == "dispatch.py" for p in files)
    bad = [b for p in files for b in tools_imported(p.read_text(), p.relative_to(ROOT).as_posix())]
    assert not bad, "the package imports the measuring tools, which are not installed with it:\n" + \
        "\n".join(bad)


def test_the_import_rules_catch_planted_violations():
    # private names of the package, however imported; public ones and dunders pass
    planted = ("from dawnbench_fast.analyze.leaderboard import _timestamp\n"
               "import dawnbench_fast._C\n"
               "def f():\n    from dawnbench_fast.csrc import _native as n\n"
               "from dawnbench_fast._private.x import y\n")
    assert [b.split(": ")[1] for b in private_names_imported(planted)] == [
        "dawnbench_fast.analyze.leaderboard._timestamp", "dawnbench_fast._C", "dawnbench_fast.csrc._native",
        "dawnbench_fast._private.x.y"]
    fine = ("from dawnbench_fast import __version__, dispatch\n"
            "from dawnbench_fast.analyze.__main__ import main\n"
            "from tools.gpu_suite import _record\nimport torch._dynamo\nfrom . import _x\n")
    assert private_names_imported(fine) == []
    # the tools from the package, at module level, in a function, or by name
    planted = ("import tools\nfrom tools.gpu_suite import ops\n"
               "def f():\n    from tools import results\n    importlib.import_module('tools.step_timing')\n")
    assert [b.split(": ")[1] for b in tools_imported(planted)] == [
        "tools", "tools.gpu_suite", "tools", "tools.step_timing"]
    assert tools_imported("import toolsy\nfrom dawnbench_fast import tools_x\nfrom . import tools\n") == []
