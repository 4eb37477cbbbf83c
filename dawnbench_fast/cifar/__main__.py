"""``python -m dawnbench_fast.cifar``: see dawnbench_fast.cifar.cli."""

import sys

from dawnbench_fast.runner import stopping

# First, before torch is imported: a stop during the imports is one line and 130 or 143.
stopping.catch_stops_from_start_up("python -m dawnbench_fast.cifar")

from dawnbench_fast.cifar.cli import main  # noqa: E402 - after the handlers, on purpose

sys.exit(stopping.run_main(main))
