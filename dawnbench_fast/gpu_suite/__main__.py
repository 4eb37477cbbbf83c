"""``python -m dawnbench_fast.gpu_suite``: the GPU suite (suite.py)."""

import sys

from dawnbench_fast.gpu_suite.suite import main

sys.exit(main())
