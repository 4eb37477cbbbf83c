"""Triton kernels, imported as ``dawnbench_fast.kernels``.

Importing this package is cheap; :mod:`dawnbench_fast.kernels.ops` (loaded by
``--kernels triton``) imports Triton and registers the kernels with dispatch.
``launch_counts`` counts launches per kernel name (tests assert on it).
"""

from dawnbench_fast.kernels.launches import launch_counts

__all__ = ["launch_counts"]
