"""Where the tests find a shared dataset: its environment variable, else the
copy beside the checkout (``shared/data/<name>`` in the repository's parent
folder). A test that needs one skips, naming the variable, when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def dataset_dir(env_var: str, name: str, marker: str, what: str) -> Path:
    """``$env_var``, else ``SHARED_DATA / name``; skips the test unless ``marker`` is a file there."""
    path = Path(os.environ.get(env_var) or SHARED_DATA / name)
    if not (path / marker).is_file():
        pytest.skip(f"{what} not found at {path}; set {env_var}")
    return path
