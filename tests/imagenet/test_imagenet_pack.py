"""The packed split file (data/imagenet/pack.py): it round-trips a source
(bytes, labels, synsets), is written atomically, and a wrong or damaged file
is one line naming it."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from PIL import Image
from support.imagenet_sample import sample_tree

from dawnbench_fast.data.imagenet import pack as P
from dawnbench_fast.data.imagenet.errors import BadImage, DataError
from dawnbench_fast.data.imagenet.folder import ImageFolder
from dawnbench_fast.data.imagenet.loader import open_source
from dawnbench_fast.data.imagenet.source import ImageSource
from dawnbench_fast.data.imagenet.synthetic import make_image_folder


@pytest.fixture(scope="module")
def small_folder(tmp_path_factory):
    root = make_image_folder(tmp_path_factory.mktemp("gen"), classes=3, train_per_class=4, val_per_class=1,
                             size=40)
    return ImageFolder(root / "train")


def test_round_trip_keeps_small_jpegs_byte_for_byte(small_folder, tmp_path):
    out = tmp_path / "train.pack"
    stats = P.pack(small_folder, out, P.Limit(P.LIMIT_LONGER, 256), threads=2)
    assert stats.images == len(small_folder) and stats.bad == [] and stats.bytes == out.stat().st_size
    packed = open_source(out)
    assert isinstance(packed, P.PackedSource) and isinstance(packed, ImageSource)
    assert len(packed) == len(small_folder) and packed.classes == small_folder.classes
    assert packed.labels.tolist() == small_folder.labels.tolist()
    for i in range(len(packed)):
        assert packed.read(i) == small_folder.read(i)  # within the cap: the original bytes
    assert packed.name(5).endswith("[5] (n00000001/n00000001_1.JPEG)")
    assert packed.limit == P.Limit(P.LIMIT_LONGER, 256, 90)
    assert [p.name for p in tmp_path.iterdir()] == ["train.pack"]  # no temporary file left


def test_real_images_are_resized_to_the_cap(tmp_path):
    source = ImageFolder(sample_tree(tmp_path / "tree") / "train")
    out = tmp_path / "sample.pack"
    P.pack(source, out, P.Limit(P.LIMIT_LONGER, 128, 90), threads=2)
    packed = P.PackedSource(out)
    for i in range(0, len(source), 9):
        orig = Image.open(io.BytesIO(source.read(i)))
        img = Image.open(io.BytesIO(packed.read(i)))
        assert img.format == "JPEG" and img.mode == "RGB" and max(img.size) == 128
        assert abs(img.width / img.height - orig.width / orig.height) < 0.02
        # the content survives: the packed image against the original shrunk the same way
        ref = np.asarray(orig.convert("RGB").resize(img.size, Image.BICUBIC), dtype=np.int16)
        assert np.abs(np.asarray(img, dtype=np.int16) - ref).mean() < 6


def test_short_side_limit():
    limit = P.Limit(P.LIMIT_SHORTER, 100)
    assert limit.target(500, 375) == (133, 100) and limit.target(90, 400) is None
    assert P.Limit(P.LIMIT_NONE, 0).target(5000, 5000) is None


def test_bad_images_stop_the_packing_or_are_skipped(small_folder, tmp_path):
    bad = tmp_path / "n00000001" / "broken.JPEG"
    root = tmp_path
    for i in range(len(small_folder)):
        dest = root / small_folder.name(i).split("/")[-2] / small_folder.name(i).split("/")[-1]
        dest.parent.mkdir(exist_ok=True)
        dest.write_bytes(small_folder.read(i))
    bad.write_bytes(b"GIF89a but not really")
    source = ImageFolder(root)
    with pytest.raises(BadImage, match="broken.JPEG: not a readable image"):
        P.pack(source, tmp_path / "x.pack", threads=1)
    assert not list(tmp_path.glob("*.pack")) and not list(tmp_path.glob(".x.pack*"))  # nothing half-written
    stats = P.pack(source, tmp_path / "x.pack", threads=1, skip_bad=True)
    assert stats.images == len(source) - 1 and stats.bad == [str(bad)]
    packed = P.PackedSource(tmp_path / "x.pack")
    assert packed.labels.tolist() == [0] * 4 + [1] * 4 + [2] * 4


def test_an_interrupted_write_leaves_the_old_file(small_folder, tmp_path, monkeypatch):
    out = tmp_path / "train.pack"
    out.write_bytes(b"the previous version")

    def fail(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(P.os, "fsync", fail)
    with pytest.raises(KeyboardInterrupt):
        P.pack(small_folder, out, threads=1)
    assert out.read_bytes() == b"the previous version"
    assert [p.name for p in tmp_path.iterdir()] == ["train.pack"]


def test_wrong_or_damaged_files_are_clear_errors(small_folder, tmp_path):
    good = tmp_path / "good.pack"
    P.pack(small_folder, good, threads=1)
    data = good.read_bytes()
    cases = {
        "magic": (b"NOTAPACK" + data[8:], "not a packed image file"),
        "empty": (b"", "not a packed image file"),
        "version": (data[:8] + struct.pack("<I", 99) + data[12:], "format version 99"),
        "truncated": (data[:-10], "truncated or damaged"),
    }
    for name, (content, expected) in cases.items():
        path = tmp_path / f"{name}.pack"
        path.write_bytes(content)
        with pytest.raises(DataError) as err:
            P.PackedSource(path)
        assert str(err.value).startswith(str(path)) and expected in str(err.value), name
        assert "\n" not in str(err.value)
    with pytest.raises(DataError, match="cannot be opened"):
        P.PackedSource(tmp_path / "missing.pack")


def test_cli(small_folder, tmp_path, capsys):
    out = tmp_path / "t.pack"
    assert P.main([str(small_folder.root), str(out), "--max-side", "32", "--threads", "1"]) == 0
    assert "12 images, 3 classes" in capsys.readouterr().out
    assert max(Image.open(io.BytesIO(P.PackedSource(out).read(0))).size) == 32
    assert P.main([str(small_folder.root), str(out)]) == 2  # exists: needs --overwrite
    assert "pass --overwrite" in capsys.readouterr().err
    val = small_folder.root.parent / "val"
    assert P.main([str(val), str(tmp_path / "v.pack"), "--classes-from", str(small_folder.root),
                   "--short-side", "300"]) == 0
    assert P.PackedSource(tmp_path / "v.pack").classes == small_folder.classes
    assert P.main([str(tmp_path / "nowhere"), str(tmp_path / "n.pack")]) == 2
    assert "no such folder" in capsys.readouterr().err
