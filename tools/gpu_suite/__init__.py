"""The GPU suite and its companions: what measures the project on a GPU machine
without network, reached by a command runner that returns a few files
(docs/GPU_SUITE.md). Each is a command run from the repository root, where
``python -m`` finds tools/ (never installed) and the checkout's
dawnbench_fast/ before the package is installed (the suite's ``build`` part
is what installs the package on a fresh GPU machine):

- ``python -m tools.gpu_suite``: the suite's parts (``suite.py``);
- ``python -m tools.gpu_suite.measure``: the prepared measuring
  script: its commands in order, from a cold machine to a ratio (docs/GPU_SUITE.md);
- ``python -m tools.gpu_suite.bounds``: each op's roofline bound
  beside its measured times;
- ``python -m tools.gpu_suite.sweep_bn_act`` and
  ``... .sweep_conv_group``: launch configurations, timed.

The package (dawnbench_fast) never imports these; this folder imports nothing that
needs Triton at import time, so that a sweep's ``--dry-run`` can still set
``TRITON_INTERPRET`` before triton is first imported.
"""
