"""Roofline analysis, imported as ``dawnbench_fast.roofline``."""
