"""dawnbench_fast: time-to-accuracy training backed by our own kernels."""

__version__ = "0.1.0"
