"""The project's own measuring tools, beside the package and never installed
with it (``pip install .`` ships dawnbench_fast alone). Each is a command run
from the repository root, where ``python -m`` finds this folder:

- ``python -m tools.gpu_suite``: the GPU suite and its companions
  (gpu_suite/: the measuring script, the roofline bounds, the launch sweeps;
  docs/GPU_SUITE.md);
- ``python benchmarks/bench_in_step.py``: the in-step benchmark, the captured
  training step timed with each kernel face switched in one op at a time
  (step_timing.py, step_arms.py, step_kernels.py; docs/GPU_SUITE.md, "The
  in-step benchmark");
- ``python -m tools.results docs/results --write README.md``: README's results
  table, built from the committed run files (results.py, result_files.py).

The tools use the package's public names only (nothing whose name starts
with ``_``), and the package never imports them (tests/test_packaging.py).
Nothing is imported here: ``python -m tools.X`` imports this package first,
before its command can catch a stop signal.
"""
