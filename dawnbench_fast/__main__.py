"""`python -m dawnbench_fast` runs the CIFAR-10 job."""

import sys

from dawnbench_fast.cifar import main

sys.exit(main())
