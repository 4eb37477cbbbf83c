"""Triton kernels, imported as ``dawnbench_fast.kernels``."""
