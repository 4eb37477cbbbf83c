"""``python -m tools.gpu_suite``: the GPU suite (suite.py)."""

import sys

from dawnbench_fast.runner import stopping

# First, before torch is imported: a stop during the imports is one line and 130 or 143.
stopping.catch_stops_from_start_up("gpu_suite")

from tools.gpu_suite.suite import main  # noqa: E402 - after the handlers, on purpose

sys.exit(stopping.run_main(main))
