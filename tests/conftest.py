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

import signal
import sys
from pathlib import Path

# A shell that starts a command in the background (`cmd &` in a script, a CI
# runner's job) sets SIGINT to ignored, and an ignored signal stays ignored in
# every process started after: the stop tests, which send SIGINT to a command
# as a terminal's ^C does, would then find it deaf. The suite's processes take
# SIGINT as a terminal's do, however the test run was started.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# tests/ itself on the path, wherever a test file sits: the shared helpers are
# the package `support` (tests/support/), the op tests the package `ops`.
sys.path.insert(0, str(Path(__file__).resolve().parent))
