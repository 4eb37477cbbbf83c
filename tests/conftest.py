"""Shared test set-up.

Triton reads TRITON_INTERPRET when a kernel is first decorated, so it is set
here, before any test module imports ``dawnbench_fast.kernels``: on a machine
without a GPU the Triton kernels then run on CPU tensors in the interpreter.
Ahead-of-time compilation (tests/ops/test_triton_aot.py) runs in a subprocess
whose environment drops the variable, because ``triton.compile`` does not
work while the interpreter is on.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import signal
import sys
from pathlib import Path

# A shell that starts a command in the background (`cmd &` in a script, a CI
# runner's job) sets SIGINT to ignored, and an ignored signal stays ignored in
# every process started after: the stop tests, which send SIGINT to a command
# as a terminal's ^C does, would then find it deaf. The suite's processes take
# SIGINT as a terminal's do, however the test run was started.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# tests/ itself on the path, wherever a test file sits: the shared helpers are
# the package `support` (tests/support/), the op tests the package `ops`.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest  # noqa: E402
from support import tiers  # noqa: E402
from support.cifar_data import read_the_shared_copy_once  # noqa: E402

read_the_shared_copy_once()

# The tiers (pyproject's markers): `python -m pytest` runs the default tier, which
# leaves out `build` (compilers) and `e2e` (whole training runs); `-m "build or e2e"`
# runs those, `-m ""` everything. docs/ARCHITECTURE.md, "Testing".
_run: dict = {"deselected_outside_the_tiers": 0, "finished": 0, "items": []}
COVERAGE_TEST = "test_house.py::test_the_default_tier_imports_every_module"


def _named(config: pytest.Config) -> set[Path]:
    """The files named on the command line (``path`` or ``path::test``)."""
    here = Path(config.invocation_params.dir)
    return {(here / a.split("::")[0]).resolve() for a in config.args}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under the default tier, a test file whose ``pytestmark`` puts all its tests in
    another tier is not even imported (unless named on the command line): its imports
    would otherwise count as the default tier's in the module check below."""
    if (config.option.markexpr != tiers.DEFAULT_EXPRESSION or collection_path.suffix != ".py"
            or not collection_path.name.startswith("test_") or collection_path in _named(config)):
        return None
    return True if tiers.file_tiers(collection_path) else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The module check runs last, when the tier's tests have imported what they import."""
    last = [i for i in items if i.nodeid.endswith(COVERAGE_TEST)]
    items[:] = [i for i in items if i not in last] + last
    _run["items"] = items


def pytest_deselected(items: list[pytest.Item]) -> None:
    _run["deselected_outside_the_tiers"] += sum(
        not any(item.get_closest_marker(t) for t in tiers.TIERS) for item in items)


def pytest_runtest_logfinish() -> None:
    _run["finished"] += 1


@pytest.fixture
def whole_default_tier(request) -> str | None:
    """None when this run holds the whole default tier (every test of tests/ but those of the
    build and e2e tiers, at most) and every test before this one ran; else why not."""
    config, items = request.config, _run["items"]
    testpaths = {(config.rootpath / p).resolve() for p in config.getini("testpaths")}
    if config.args_source != pytest.Config.ArgsSource.TESTPATHS and _named(config) != testpaths:
        return "not a run of all of tests/"
    if _run["deselected_outside_the_tiers"] or config.getoption("lf", False):
        return "tests outside the build and e2e tiers were deselected"
    if _run["finished"] != len(items) - 1 or items[-1] is not request.node:
        return "not the last test of the run, or tests before it did not run"
    return None
