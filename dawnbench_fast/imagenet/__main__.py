"""``python -m dawnbench_fast.imagenet``: see dawnbench_fast.imagenet.cli."""

import sys

from dawnbench_fast.runner import stopping

# First, before torch is imported: a stop during the imports is one line and 130 or 143.
stopping.catch_stops_from_start_up("python -m dawnbench_fast.imagenet")

from dawnbench_fast.imagenet.cli import main  # noqa: E402 - after the handlers, on purpose

sys.exit(stopping.run_main(main))
