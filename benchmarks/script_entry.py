"""``python benchmarks/bench_X.py --flags``: the command lines that
docs/PERFORMANCE.md recorded for the scripts these benchmarks once were, kept
working. The flags become the ``BENCH_*`` settings (benchmarks/knobs.py) and
the module runs under pytest-benchmark with ``--benchmark-autosave`` (the
JSON goes to the repository's ``.benchmarks/``, ignored by git, wherever the
script is started from); any argument the script does not know is passed to
pytest (``--benchmark-compare``, ``-k ...``, ``--benchmark-storage=DIR``).
"""

from __future__ import annotations

import os

import pytest
from knobs import REPO


def run(module_file: str, settings: dict[str, object], json_path: str | None = None,
        select: list[str] | None = None, pytest_args: list[str] | None = None) -> int:
    """Run ``module_file``'s benchmarks with ``settings`` (``BENCH_*`` name ->
    value; None leaves the file's default) and return pytest's exit status
    (0 when everything was skipped, e.g. without a GPU). ``select``: test-name
    words joined into one ``-k`` expression."""
    for name, value in settings.items():
        if value is not None:
            os.environ[name] = ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
    args = [module_file, "--benchmark-autosave", f"--benchmark-storage={REPO / '.benchmarks'}",
            "--benchmark-columns=median,iqr,min,max,rounds", "--benchmark-sort=name"]
    if json_path:
        args += ["--benchmark-json", json_path]
    if select:
        args += ["-k", " or ".join(select)]
    return int(pytest.main([*args, *(pytest_args or [])]))
