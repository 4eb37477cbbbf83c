"""The built wheel ships dawnbench_fast and its mapped subpackages, and no
top-level `kernels` (that name belongs to a PyPI package)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import dawnbench_fast

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.build


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built once with the installed setuptools (as CI's set-up has it)."""
    out = tmp_path_factory.mktemp("wheel")
    env = {**os.environ, "DAWNBENCH_NO_EXT": "1"}  # pure-Python wheel: fast, no compilers
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
