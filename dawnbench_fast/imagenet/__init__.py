"""ImageNet to 93% top-5: ``python -m dawnbench_fast.imagenet`` (cli.py).

The package's modules: recipe.py (FFCV's ResNet-50 recipe as named data,
its resolution ramp, the named recipes), task.py (the data through the
pipeline of dawnbench_fast.data.imagenet, the config as the loop runs it, the
ResNet and its optimiser, :class:`ImageNetTask`), cli.py (the command line).
Its public API, for scripts and notebooks, is named here.
"""

from dawnbench_fast.imagenet.cli import PROG, build_parser, config_from_args, main
from dawnbench_fast.imagenet.task import Config, ImageNetTask, load_model

__all__ = ["PROG", "Config", "ImageNetTask", "build_parser", "config_from_args", "load_model", "main"]
