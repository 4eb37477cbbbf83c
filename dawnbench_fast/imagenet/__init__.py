"""ImageNet to 93% top-5: ``python -m dawnbench_fast.imagenet`` (cli.py).

The package's modules: recipe.py (FFCV's ResNet-50 recipe as named data,
its resolution ramp, the named recipes), task.py (the data through the
pipeline of dawnbench_fast.data.imagenet, the config as the loop runs it, the
ResNet and its optimiser, :class:`ImageNetTask`), cli.py (the command line).
Its public API, for scripts and notebooks, is named here.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names, for type checkers and editors
    from dawnbench_fast.imagenet.cli import PROG, build_parser, config_from_args, main
    from dawnbench_fast.imagenet.task import Config, ImageNetTask, load_model

__all__ = ["PROG", "Config", "ImageNetTask", "build_parser", "config_from_args", "load_model", "main"]

# The names are imported when first used (PEP 562), not here: ``python -m dawnbench_fast.imagenet``
# imports this package before its __main__.py, which must catch a stop signal before torch is
# imported (runner/stopping.py), so importing the package alone imports nothing heavy.
_API = {"Config": "task", "ImageNetTask": "task", "PROG": "cli", "build_parser": "cli",
        "config_from_args": "cli", "load_model": "task", "main": "cli"}


def __getattr__(name: str) -> object:
    if name in _API:
        return getattr(importlib.import_module(f"{__name__}.{_API[name]}"), name)
    if not name.startswith("__"):  # a module of the package, e.g. imagenet.cli
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
