"""The loader's rate per core: ImageNet's own loader
(data/imagenet/loader.py) on one decoding thread, timed at each side for
about ``seconds`` by ``ImageNetLoader.time_images`` (the trainer's
pre-flight timing: decode, random-resized crop, resize, flip into a uint8
slot), so that the cores a GPU needs follow from the step's rate.
benchmarks/bench_imagenet_loader.py measures the same work per core with
pytest-benchmark, against a PIL baseline; this is the figure the projection
(projection.py) reads, the inputs' ``loader`` section.
"""

from __future__ import annotations

import os
from pathlib import Path

from dawnbench_fast.data.imagenet.loader import ImageNetLoader, open_source


def per_core(path: str | Path, sides: list[int], seconds: float, decoder: str = "pil",
             batch: int = 64) -> dict[str, float]:
    """Images per second on one thread at each of ``sides`` px, keyed by the side."""
    source = open_source(path)
    out = {}
    with ImageNetLoader(source, global_batch=min(batch, len(source)), seed=0, threads=1,
                        decoder=decoder) as loader:
        loader.time_images(min(sides), 0.2)  # the numba kernel's first call compiles: not timed
        for side in sides:
            images, took = loader.time_images(side, seconds)
            out[str(side)] = images / took if took > 0 else 0.0
    return out


def measure_forms(paths: dict[str, str | Path], sides: list[int], seconds: float,
                  decoder: str = "pil") -> dict:
    """The inputs' ``loader`` section: ``per_core`` for each form (``packed``:
    a pack.py file; ``folder``: a split of JPEG files), with what was measured."""
    load = os.getloadavg()[0]
    forms = {form: per_core(path, sides, seconds, decoder) for form, path in paths.items()}
    return {"forms": forms, "decoder": decoder, "threads": 1, "data": {k: str(v) for k, v in paths.items()},
            "loadavg_before": load, "source": "measured: dawnbench_fast.imagenet.loader_rate, one thread"}
