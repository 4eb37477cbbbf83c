"""ImageNet to 93% top-5: ``python -m dawnbench_fast.imagenet`` (cli.py).

The package's modules: recipe.py (FFCV's ResNet-50 recipe as named data,
its resolution ramp, the named recipes), task.py (the data through the
pipeline of dawnbench_fast.data.imagenet, the config as the loop runs it, the
ResNet and its optimiser, :class:`ImageNetTask`), cli.py (the command line).
Its public API, for scripts and notebooks, is named here.
"""

from typing import TYPE_CHECKING

from dawnbench_fast.lazy_names import lazy_names

if TYPE_CHECKING:  # the names, for type checkers and editors
    from dawnbench_fast.imagenet.cli import PROG, build_parser, config_from_args, main
    from dawnbench_fast.imagenet.task import Config, ImageNetTask, load_model

__all__ = ["PROG", "Config", "ImageNetTask", "build_parser", "config_from_args", "load_model", "main"]

# The names are imported when first used (dawnbench_fast/lazy_names.py says why).
_API = {"Config": "task", "ImageNetTask": "task", "PROG": "cli", "build_parser": "cli",
        "config_from_args": "cli", "load_model": "task", "main": "cli"}


__getattr__ = lazy_names(__name__, _API)
