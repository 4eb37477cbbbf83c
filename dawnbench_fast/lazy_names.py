"""A package's public names imported when first used (PEP 562's module
``__getattr__``), so that importing the package alone imports nothing heavy:
``python -m dawnbench_fast.cifar`` imports the package before its
``__main__.py``, which must catch a stop signal before torch is imported
(runner/stopping.py). Only the standard library here, for that reason."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_names(package: str, api: dict[str, str]) -> Callable[[str], object]:
    """The ``__getattr__`` of ``package``: each name of ``api`` from the
    module it names (``{"Config": "task"}``: ``package.task.Config``), any
    other name as a module of the package (``package.cli``)."""

    def getattr_(name: str) -> object:
        if name in api:
            return getattr(importlib.import_module(f"{package}.{api[name]}"), name)
        if not name.startswith("__"):
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"{package}.{name}":
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return getattr_
