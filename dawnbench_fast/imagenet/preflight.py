"""The loader's pre-flight: after the warm-up, before the clock starts, time
the ImageNet loader for a few seconds and say whether it can feed the
training steps on this device, and what to do if it cannot.

Why: a GPU step of ResNet-50 at batch 128 per GPU wants a few thousand
images a second per rank; full-size JPEGs decoded on too few cores give a
few hundred, and the run then measures the CPU, not the GPU, with nothing
saying so until the time to accuracy comes out several times too long.

What it compares: the images per second this rank's loader decodes, crops
and resizes on its threads at the side of the fastest step (the smallest,
as a rule), against the images per second the steps consume, estimated
from the warm-up: this rank's batch divided by its fastest timed step (the
first step of each side is left out: it compiles and selects kernels). All
ranks of a torchrun job time their loaders at once, so they share the CPU as
they will in training. On a CPU device the steps and the loader share the
cores, so a verdict of "keeps up" there is optimistic.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass

from dawnbench_fast.data.imagenet.loader import ImageNetLoader, default_threads
from dawnbench_fast.data.imagenet.pack import PackedSource


@dataclass
class Preflight:
    """One pre-flight (run.json's ``result.loader_preflight``)."""

    loader_images_per_s: float
    needed_images_per_s: float  # this rank's batch / the fastest warm-up step
    step_seconds: float
    batch_per_rank: int
    side: int
    threads: int
    decoder: str
    packed: bool  # the source is a pack (pack.py), not a folder of JPEGs
    seconds: float  # how long the loader was timed

    @property
    def keeps_up(self) -> bool:
        return self.loader_images_per_s >= self.needed_images_per_s

    def record(self) -> dict:
        return {**asdict(self), "keeps_up": self.keeps_up}


STEPS_TIMED = 8  # the timing stops earlier once the loader has made this many steps' images


def run_preflight(loader: ImageNetLoader, side: int, step_seconds: float, seconds: float) -> Preflight:
    """Time ``loader`` at ``side`` px for about ``seconds`` (or
    :data:`STEPS_TIMED` batches, if sooner) and compare it with steps of
    ``step_seconds`` on its batch."""
    images, took = loader.time_images(side, seconds, max_images=STEPS_TIMED * loader.local_batch)
    return Preflight(loader_images_per_s=images / took if took > 0 else 0.0,
                     needed_images_per_s=loader.local_batch / step_seconds if step_seconds > 0 else 0.0,
                     step_seconds=step_seconds, batch_per_rank=loader.local_batch, side=side,
                     threads=loader.threads, decoder=loader.decoder.name,
                     packed=isinstance(loader.source, PackedSource), seconds=took)


def advice(p: Preflight, decoder_installed: bool) -> list[str]:
    """What would make the loader faster, most effective first."""
    out = []
    if not p.packed:
        out.append("pack the data once (python -m dawnbench_fast.data.imagenet.pack DIR/train "
                   "DIR/train.pack, the same for val: smaller JPEGs decode several times faster)")
    cores = default_threads()
    if p.threads < cores:
        out.append(f"more decoding threads (--set loader_threads={cores}; now {p.threads})")
    if p.decoder == "pil":
        out.append("--decoder simplejpeg" + ("" if decoder_installed else
                                             " (pip install 'dawnbench-fast[jpeg]')"))
    out.append("more CPU cores per GPU, or a larger --batch-size per step")
    return out


def message(p: Preflight, decoder_installed: bool) -> str:
    """The one line the run prints (stderr) about ``p``."""
    rates = (f"pre-flight: the loader gives {p.loader_images_per_s:.0f} images/s at {p.side} px "
             f"({p.threads} threads, {p.decoder}{', packed' if p.packed else ''}); the steps take "
             f"{p.needed_images_per_s:.0f} images/s ({p.batch_per_rank} per step of "
             f"{1000 * p.step_seconds:.0f} ms in the warm-up)")
    if p.keeps_up:
        return f"{rates}: it keeps up ({p.loader_images_per_s / max(p.needed_images_per_s, 1e-9):.1f}x)"
    share = p.loader_images_per_s / max(p.needed_images_per_s, 1e-9)
    return (f"{rates}: it cannot keep up, training will run at about {100 * share:.0f}% of the device's "
            f"pace; try: {'; '.join(advice(p, decoder_installed))} (skip this check: --no-preflight)")


def report(p: Preflight, main: bool) -> None:
    """Print ``p``'s line on rank 0."""
    if main:
        import importlib.util
        installed = importlib.util.find_spec("simplejpeg") is not None
        print(message(p, installed), file=sys.stderr, flush=True)
