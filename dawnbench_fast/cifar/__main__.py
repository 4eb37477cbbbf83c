"""``python -m dawnbench_fast.cifar``: see dawnbench_fast.cifar.cli."""

import sys

from dawnbench_fast.cifar.cli import main

sys.exit(main())
