"""The built wheel ships dawnbench_fast and its mapped subpackages, and no
top-level `kernels` (that name belongs to a PyPI package)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_has_no_top_level_kernels(tmp_path):
    env = {**os.environ, "DAWNBENCH_NO_EXT": "1"}  # pure-Python wheel: fast, no compilers
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), "-q"],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = tmp_path.glob("dawnbench_fast-*.whl")
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
