"""CIFAR-10 to 94%: ``python -m dawnbench_fast.cifar`` (cli.py).

The package's modules: recipe.py (every hyperparameter as named data, the
named recipes), train_state.py (the net and optimisers, built once per
process and reset for each seed), task.py (the config as the loop runs it,
:class:`CifarTask`), evaluation.py (BN folded, the test set's
top-1), tta.py (the test-time augmentation views, selective TTA), cli.py
(the command line). Its public API, for scripts and notebooks, is named here.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names, for type checkers and editors
    from dawnbench_fast.cifar.cli import PROG, build_parser, config_from_args, main
    from dawnbench_fast.cifar.evaluation import evaluate
    from dawnbench_fast.cifar.recipe import RECIPES
    from dawnbench_fast.cifar.task import CifarTask, Config, load_model

__all__ = ["PROG", "RECIPES", "CifarTask", "Config", "build_parser", "config_from_args", "evaluate",
           "load_model", "main"]

# The names are imported when first used (PEP 562), not here: ``python -m dawnbench_fast.cifar``
# imports this package before its __main__.py, which must catch a stop signal before torch is
# imported (runner/stopping.py), so importing the package alone imports nothing heavy.
_API = {"CifarTask": "task", "Config": "task", "PROG": "cli", "RECIPES": "recipe", "build_parser": "cli",
        "config_from_args": "cli", "evaluate": "evaluation", "load_model": "task", "main": "cli"}


def __getattr__(name: str) -> object:
    if name in _API:
        return getattr(importlib.import_module(f"{__name__}.{_API[name]}"), name)
    if not name.startswith("__"):  # a module of the package, e.g. cifar.cli
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
