"""``python -m dawnbench_fast.imagenet``: see dawnbench_fast.imagenet.cli."""

import sys

from dawnbench_fast.imagenet.cli import main

sys.exit(main())
