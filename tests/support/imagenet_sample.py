"""Where the tests find the real-JPEG ImageNet sample: $DAWNBENCH_IMAGENET_SAMPLE,
else the shared copy beside the checkout (``shared/data/imagenet-sample`` in
the repository's parent folder). It holds 100 folders ``<synset>/<file>.JPEG``
with one image each (one of them grayscale), ``synset_to_index.tsv`` (the
standard index of all 1000 synsets) and ``SOURCE.txt``. Tests that need it
skip with the reason when it is absent."""

from __future__ import annotations

from pathlib import Path

from support.shared_data import dataset_dir


def sample_dir() -> Path:
    return dataset_dir("DAWNBENCH_IMAGENET_SAMPLE", "imagenet-sample", "synset_to_index.tsv",
                       "ImageNet sample")


def sample_files() -> list[Path]:
    """The sample's JPEG files, sorted by synset."""
    return sorted(sample_dir().glob("n*/*.JPEG"))


def standard_index() -> dict[str, int]:
    """synset -> standard ILSVRC-2012 class index, from the sample's TSV."""
    lines = (sample_dir() / "synset_to_index.tsv").read_text().splitlines()[1:]
    return {synset: int(index) for index, synset, _ in (line.split("\t") for line in lines)}


def sample_tree(root: Path) -> Path:
    """``root/train/<synset>/<file>`` and ``root/val/...``: symlinks to the sample's images."""
    for split in ("train", "val"):
        for f in sample_files():
            dest = root / split / f.parent.name / f.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.symlink_to(f)
    return root
