"""CIFAR-10 to 94%: ``python -m dawnbench_fast.cifar`` (cli.py).

The package's modules: recipe.py (every hyperparameter as named data, the
named recipes), train_state.py (the net and optimisers, built once per
process and reset for each seed), task.py (the config as the loop runs it,
:class:`CifarTask`), evaluation.py (BN folded, the test set's
top-1), tta.py (the test-time augmentation views, selective TTA), cli.py
(the command line). Its public API, for scripts and notebooks, is named here.
"""

from typing import TYPE_CHECKING

from dawnbench_fast.lazy_names import lazy_names

if TYPE_CHECKING:  # the names, for type checkers and editors
    from dawnbench_fast.cifar.cli import PROG, build_parser, config_from_args, main
    from dawnbench_fast.cifar.evaluation import evaluate
    from dawnbench_fast.cifar.recipe import RECIPES
    from dawnbench_fast.cifar.task import CifarTask, Config, load_model

__all__ = ["PROG", "RECIPES", "CifarTask", "Config", "build_parser", "config_from_args", "evaluate",
           "load_model", "main"]

# The names are imported when first used (dawnbench_fast/lazy_names.py says why).
_API = {"CifarTask": "task", "Config": "task", "PROG": "cli", "RECIPES": "recipe", "build_parser": "cli",
        "config_from_args": "cli", "evaluate": "evaluation", "load_model": "task", "main": "cli"}


__getattr__ = lazy_names(__name__, _API)
