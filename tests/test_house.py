"""The shape of the house: no import cycles; imports go down
the floors of :data:`FLOORS`, room by room (folders of dawnbench_fast, and
kernels/, csrc/, roofline/), never up or across a floor; and no module or
function grows past what a reader holds. And the product speaks of itself and
its users only: no word of how it is developed (:data:`DEVELOPMENT_WORDS`).

Imports are read from the source with ``ast`` (module level and inside
functions alike), so an import hidden in a function to dodge a cycle at import
time still counts as the dependency it is.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from support import tiers
from support.tiers import package_modules

ROOT = Path(__file__).resolve().parents[1]
WARN_MODULE_LINES = 450  # look for a seam
MAX_MODULE_LINES = 600  # split
MAX_FUNCTION_LINES = 80


MODULES = package_modules()
# The project's measuring tools (tools/, beside the package, never installed): held to the
# package's size limits; their imports are tests/test_packaging.py's.
TOOLS = sorted((ROOT / "tools").rglob("*.py"))


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
    src.write_text("def f():\n    from dawnbench_fast import dispatch\n    from .reporting import bench\n"
                   "    import dawnbench_fast.kernels.launches as l\n")
    assert _imports("dawnbench_fast.fake", src) == {
        "dawnbench_fast.dispatch", "dawnbench_fast.reporting.bench", "dawnbench_fast.kernels.launches"}


def test_cycle_finder_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


# The rooms of the house by floor, lowest first (docs/ARCHITECTURE.md). A module
# imports only from its own room or from rooms on lower floors; rooms on the
# same floor never import each other (so kernels/ and csrc/ never import the
# model or the optimiser, and these never import the kernels: they look ops up
# through dispatch). The package root and a top-level module are rooms of
# their own, named by the module.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("dawnbench_fast", "vocabulary", "atomic", "lazy_names"),
    ("kernel_winners",),
    ("dispatch", "layer_ops", "newton_schulz", "op_path"),
    ("hardware",),
    ("config",),
    ("data",),
    ("roofline",),
    ("kernels", "csrc", "models", "optim"),
    ("execution",),
    ("training",),
    ("reporting",),
    ("runner",),
    ("cifar", "imagenet"),
    ("analyze",),
    ("__main__",),
)
FLOOR_OF = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}


def room(module: str) -> str:
    """The room of a module: the folder (or top-level module) under dawnbench_fast."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for m, targets in graph.items():
        for t in targets:
            a, b = room(m), room(t)
            if a != b and FLOOR_OF[b] >= FLOOR_OF[a]:
                how = "the same floor as" if FLOOR_OF[b] == FLOOR_OF[a] else "a higher floor than"
                bad.append(f"{m} -> {t} ({b} is on {how} {a})")
    return sorted(bad)


def test_every_room_has_a_floor():
    rooms = {room(m) for m in MODULES}
    assert rooms <= set(FLOOR_OF), f"rooms without a floor in FLOORS: {sorted(rooms - set(FLOOR_OF))}"
    folders = {p.name for p in (ROOT / "dawnbench_fast").iterdir() if (p / "__init__.py").is_file()}
    assert folders | {"kernels", "csrc", "roofline"} <= set(FLOOR_OF)


def test_imports_go_down_the_floors():
    bad = layer_violations(_graph())
    assert not bad, "imports up or across the floors:\n" + "\n".join(bad)


def test_the_floor_rule_catches_planted_violations():
    assert layer_violations({"dawnbench_fast.csrc.x": {"dawnbench_fast.models.cifar_net"}}) == [
        "dawnbench_fast.csrc.x -> dawnbench_fast.models.cifar_net (models is on the same floor as csrc)"]
    assert layer_violations({"dawnbench_fast.models.a": {"dawnbench_fast.kernels.b"}})
    assert layer_violations({"dawnbench_fast.data.a": {"dawnbench_fast.training.train"}})
    assert layer_violations({"dawnbench_fast.training.a": {"dawnbench_fast.data.b"}}) == []


def test_no_module_over_the_line_limit():
    """A module is one thought a reader holds: past :data:`WARN_MODULE_LINES`
    a warning says to look for its seam; past :data:`MAX_MODULE_LINES` it must
    be split. Two limits, not one, because a single hard cap at the warning's
    size was met by trimming docstrings to fit, which is the wrong fix."""
    files = list(MODULES.values()) + sorted((ROOT / "tests").rglob("*.py")) + \
        sorted((ROOT / "benchmarks").rglob("*.py")) + TOOLS
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in files}
    near = {k: n for k, n in sizes.items() if WARN_MODULE_LINES < n <= MAX_MODULE_LINES}
    if near:
        warnings.warn(f"modules over {WARN_MODULE_LINES} lines (split them on a seam): {near}", stacklevel=1)
    long = {k: n for k, n in sizes.items() if n > MAX_MODULE_LINES}
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
    for path in [*MODULES.values(), *TOOLS]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not _is_kernel(node):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


# -- the product's words ---------------------------------------------------------------------------
# The repository is the product: its prose (README, docs/, docstrings, comments, tests) speaks of the
# project and its users, never of how it is developed. Each pattern names one such word; legitimate
# uses (a process session, pytest's scope="session", a public project's "issue #N") do not match.
DEVELOPMENT_WORDS = {
    "an issue number (name the thing itself)": re.compile(r"\bissues? \d+\b", re.I),
    "a lent machine (say a GPU machine)": re.compile(r"\blent\b", re.I),
    "DEVELOPERS.md (gone)": re.compile(r"DEVELOPERS\.md"),
    "the device tool": re.compile(r"\bdevice tool\b", re.I),
    "device time as a budget": re.compile(r"\b(?:minutes|seconds) of device time\b|\bdevice time left\b",
                                          re.I),
    "a work session": re.compile(r"(?<!process )(?<![\"'])\bsessions?\b(?! of (?:its|their) own)", re.I),
}
# Text files scanned: the tracked files with these endings, and .ci/run. Under docs/results/ only the
# prose (README.md) and the scripts (*.sh): the rest is data, and its folder names are paths.
SCANNED_SUFFIXES = {".py", ".md", ".toml", ".txt", ".json", ".cpp", ".cu", ".cuh", ".h", ".sh", ".csv"}
RESULTS = "docs/results/"
SELF = "tests/test_house.py"  # holds the words it looks for: its patterns and planted examples


def _scanned(path: str) -> bool:
    if path == SELF:
        return False
    if path.startswith(RESULTS):
        return path.endswith(("/README.md", ".sh"))
    return path == ".ci/run" or Path(path).suffix in SCANNED_SUFFIXES


def development_words(root: Path, paths: list[str]) -> list[str]:
    """``file:line: what`` for every development word in the scanned files among ``paths``."""
    out = []
    for path in sorted(p for p in paths if _scanned(p)):
        try:
            text = (root / path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for what, pattern in DEVELOPMENT_WORDS.items():
                if m := pattern.search(line):
                    out.append(f"{path}:{number}: {what}: ...{line[max(0, m.start() - 40):m.end() + 40]}...")
    return out


def _tracked() -> list[str]:
    r = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        import pytest
        pytest.skip("not a git checkout: the tracked files are unknown")
    return r.stdout.splitlines()


def test_the_product_speaks_of_itself_not_of_its_development():
    found = development_words(ROOT, _tracked())
    assert not found, ("words of the development process (say what the thing is, for a user):\n"
                       + "\n".join(found))


def test_the_word_scan_catches_planted_words_and_passes_legitimate_ones(tmp_path):
    (tmp_path / "docs" / "results" / "ab-issue43-amx").mkdir(parents=True)
    planted = {
        "pkg/a.py": '"""The step (issue 12)."""\n# on a lent GPU\n',
        "docs/b.md": "See DEVELOPERS.md.\nThis session had an H100 for 15 minutes of device time.\n",
        "docs/results/ab-issue43-amx/README.md": "Issues 8 and 29 asked for it.\n",
        "docs/results/ab-issue43-amx/run.log": "issue 43 (data: skipped)\n",
    }
    legitimate = {
        "pkg/c.py": ('@pytest.fixture(scope="session")\n'
                     "# a process session of its own; sessions of their own\n"
                     "# NVIDIA/nvidia-docker issue #1648; the device timeline; device time per op\n"
                     "# docs/results/compare-issue43-amx/README.md; excellent\n"),
    }
    for rel, text in {**planted, **legitimate}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    found = development_words(tmp_path, [*planted, *legitimate])
    assert [f.split(": ")[0] for f in found] == [
        "docs/b.md:1", "docs/b.md:2", "docs/b.md:2", "docs/results/ab-issue43-amx/README.md:1",
        "pkg/a.py:1", "pkg/a.py:2"], found


# The modules that may decide by the device's type. A CIFAR step's decisions
# (precision, kernels, compile, capture, the optimisers' arithmetic, the loop's
# reads, the clock's waits) are made once, in its plan (cifar/step.py), from the
# resolvers below it; the rest decide for work outside the step: ImageNet's
# trainer, the kernels' own launchers (each refuses or routes a tensor by its
# device), the environment's report and the latency clock. A new module on this
# list is a decision the plan should make instead.
DEVICE_BRANCHES = {
    "dawnbench_fast.cifar.step",  # the CIFAR step's plan
    "dawnbench_fast.cifar.recipe_choice",  # the recipe a run takes by default: the GPU's or a CPU's
    # the resolvers the plans call
    "dawnbench_fast.config.precision", "dawnbench_fast.dispatch", "dawnbench_fast.execution.gpu_defaults",
    "dawnbench_fast.execution.runtime", "dawnbench_fast.execution.distributed",
    # outside the CIFAR step
    "dawnbench_fast.cifar.tta", "dawnbench_fast.data.augment_cpu", "dawnbench_fast.data.host_copy",
    "dawnbench_fast.hardware.gpu_info", "dawnbench_fast.imagenet.allreduce",
    "dawnbench_fast.imagenet.step_rate", "dawnbench_fast.imagenet.task", "dawnbench_fast.models.resnet",
    "dawnbench_fast.models.inference_conv",  # an op wrapper, as csrc's: oneDNN's reordered weight on the CPU
    "dawnbench_fast.reporting.bench",
    "dawnbench_fast.runner.command", "dawnbench_fast.runner.runs", "dawnbench_fast.training.latency",
    "dawnbench_fast.kernels.launches", "dawnbench_fast.csrc.augment", "dawnbench_fast.csrc.bias_act",
    "dawnbench_fast.csrc.bn_act", "dawnbench_fast.csrc.conv_group", "dawnbench_fast.csrc.conv_group_dgrad",
    "dawnbench_fast.csrc.conv_group_wgrad", "dawnbench_fast.csrc.engine", "dawnbench_fast.csrc.gemm",
}


def device_branches(path: Path) -> list[int]:
    """The lines of ``path`` that compare a device's type (``device.type ==
    "cuda"``, ``x.device.type in (...)``) or read ``is_cuda``."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if (isinstance(side, ast.Attribute) and side.attr == "type"
                        and "dev" in ast.unparse(side.value)):
                    out.add(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "is_cuda":
            out.add(node.lineno)
    return sorted(out)


def test_only_the_listed_modules_branch_on_the_device():
    found = {name: lines for name, path in MODULES.items() if (lines := device_branches(path))}
    new = {name: lines for name, lines in found.items() if name not in DEVICE_BRANCHES}
    assert not new, ("a decision by the device's type outside the modules that make them (the step's plan "
                     f"reads it instead, or the module joins DEVICE_BRANCHES with why): {new}")
    gone = DEVICE_BRANCHES - set(found)
    assert not gone, f"listed in DEVICE_BRANCHES but no longer branching on the device: {sorted(gone)}"


def test_the_device_scan_catches_planted_branches(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("def f(x, dev, tok):\n"
                       "    if x.device.type == 'cuda':\n"
                       "        pass\n"
                       "    a = dev.type in ('cpu',)\n"
                       "    b = x.is_cuda\n"
                       "    return tok.type == 1\n")
    assert device_branches(planted) == [2, 4, 5]


def test_the_default_tier_imports_every_module(whole_default_tier):
    """Every module of the package is imported by the default tier (``python -m
    pytest``), which leaves out the build and e2e tiers: a module that only their
    tests reach has no test in the run most people make. Judged at the end of a
    whole default-tier run (tests/conftest.py runs this test last); elsewhere skipped."""
    if whole_default_tier is not None:
        pytest.skip(f"judged at the end of a whole `python -m pytest` run only: {whole_default_tier}")
    missing = tiers.uncovered(sys.modules, MODULES)
    assert not missing, tiers.message(missing)


def test_the_module_check_names_a_module_nothing_imported(tmp_path):
    (tmp_path / "dawnbench_fast" / "training").mkdir(parents=True)
    for name in ("__init__.py", "__main__.py", "training/__init__.py", "training/loop.py",
                 "training/planted.py"):
        (tmp_path / "dawnbench_fast" / name).write_text("")
    modules = tiers.package_modules(tmp_path)
    assert set(modules) == {"dawnbench_fast", "dawnbench_fast.__main__", "dawnbench_fast.training",
                            "dawnbench_fast.training.loop", "dawnbench_fast.training.planted"}
    imported = ["dawnbench_fast", "dawnbench_fast.training", "dawnbench_fast.training.loop", "numpy"]
    assert tiers.uncovered(imported, modules) == ["dawnbench_fast.training.planted"]
    assert "dawnbench_fast.training.planted" in tiers.message(["dawnbench_fast.training.planted"])


def test_a_file_s_tier_is_read_without_importing_it(tmp_path):
    cases = {"pytestmark = pytest.mark.e2e\n": {"e2e"},
             "pytestmark = [pytest.mark.skipif(True, reason='x'), pytest.mark.build]\n": {"build"},
             "pytestmark = pytest.mark.usefixtures('x')\n": set(),
             "@pytest.mark.e2e\ndef test_one():\n    pass\n": set(),  # one test's mark: the file is collected
             "raise SystemExit('imported')\npytestmark = (pytest.mark.e2e,)\n": {"e2e"}}
    for k, (text, expected) in enumerate(cases.items()):
        path = tmp_path / f"test_{k}.py"
        path.write_text(text)
        assert tiers.file_tiers(path) == expected, text
