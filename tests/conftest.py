"""Shared test set-up.

Triton reads TRITON_INTERPRET when a kernel is first decorated, so it is set
here, before any test module imports ``dawnbench_fast.kernels``: on a machine
without a GPU the Triton kernels then run on CPU tensors in the interpreter.
Ahead-of-time compilation (tests/ops/test_triton_aot.py) runs in a subprocess
whose environment drops the variable, because ``triton.compile`` does not
work while the interpreter is on.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import sys
from pathlib import Path

# tests/ itself on the path, wherever a test file sits: the shared helpers are
# the package `support` (tests/support/), the op tests the package `ops`.
sys.path.insert(0, str(Path(__file__).resolve().parent))
