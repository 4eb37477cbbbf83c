"""The in-step benchmark: the captured CIFAR training step timed
with ``--kernels torch``, ``auto`` and each of our faces switched in one op
at a time. Everything is in tools/step_timing.py (the project's measuring
tools, beside the package and never installed); this is its command line:

    python benchmarks/bench_in_step.py --out in-step.json                    # on a GPU
    python benchmarks/bench_in_step.py --out in-step.json --arms torch,auto,bn_act=triton --budget-s 240
    python benchmarks/bench_in_step.py --out dry.json --device cpu --dry-run --replays 3   # the CPU check

A study of the whole step, not a pytest-benchmark module (tests/test_benchmarks.py
lists it among the scripts); docs/GPU_SUITE.md, "The in-step benchmark",
says how to run it on a GPU and how its result becomes the winners
table of ``--kernels auto``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# the checkout, so that tools/ is found from any working directory (Python puts
# the script's own folder, benchmarks/, on the path, not the checkout)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.step_timing import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
