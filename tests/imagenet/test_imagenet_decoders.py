"""``--decoder``: Pillow (the default) or libjpeg-turbo through simplejpeg
(data/imagenet/jpeg_turbo.py). On the real ImageNet sample both give the
same pixels at every DCT scale and the loader the same batches; a decoder
whose package is missing is a one-line error before any data is read, never
a quiet switch to Pillow (simulated by making the import fail, so it is
tested whether or not simplejpeg is installed); run.json names the decoder.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from support.imagenet_sample import sample_files, sample_tree

from dawnbench_fast import imagenet
from dawnbench_fast.data.imagenet import jpeg_turbo
from dawnbench_fast.data.imagenet.errors import BadImage, DecoderUnavailable
from dawnbench_fast.data.imagenet.folder import ImageFolder
from dawnbench_fast.data.imagenet.jpeg import PilDecoder
from dawnbench_fast.data.imagenet.loader import ImageNetLoader
from dawnbench_fast.imagenet import cli as imagenet_cli

needs_simplejpeg = pytest.mark.skipif(importlib.util.find_spec("simplejpeg") is None,
                                      reason="simplejpeg not installed (pip install 'dawnbench-fast[jpeg]')")


@pytest.fixture
def no_simplejpeg(monkeypatch):
    """As if simplejpeg were not installed."""
    real = importlib.import_module

    def refuse(name, *args, **kwargs):
        if name == "simplejpeg":
            raise ModuleNotFoundError("No module named 'simplejpeg'")
        return real(name, *args, **kwargs)
    monkeypatch.setattr(importlib, "import_module", refuse)


@needs_simplejpeg
def test_simplejpeg_decodes_the_sample_as_pillow_does_at_every_scale():
    pil, turbo = PilDecoder(), jpeg_turbo.get_decoder("simplejpeg")
    files = sample_files()
    assert len(files) == 100
    for f in files:
        data = f.read_bytes()
        w, h, a = pil.open(data, f.name)
        w2, h2, b = turbo.open(data, f.name)
        assert (w, h) == (w2, h2)
        for scale in (1, 2, 4, 8):
            _, _, a = pil.open(data, f.name)  # a Pillow image decodes once
            ours, s = pil.decode(a, f.name, scale)
            theirs, s2 = turbo.decode(b, f.name, scale)
            assert s == s2 and np.array_equal(ours, theirs), (f.name, scale)


@needs_simplejpeg
def test_the_loader_gives_the_same_batches_with_either_decoder(tmp_path):
    train = ImageFolder(sample_tree(tmp_path) / "train")
    with ImageNetLoader(train, global_batch=25, seed=1, threads=2) as a, \
            ImageNetLoader(train, global_batch=25, seed=1, threads=2, decoder="simplejpeg") as b:
        assert b.decoder.name == "simplejpeg"
        for (x, y, i), (x2, y2, i2) in zip(a.train_batches(0, 96), b.train_batches(0, 96), strict=True):
            assert torch.equal(x, x2) and torch.equal(y, y2) and torch.equal(i, i2)


@needs_simplejpeg
def test_non_jpegs_and_broken_files_through_the_simplejpeg_decoder(tmp_path):
    from PIL import Image
    turbo = jpeg_turbo.get_decoder("simplejpeg")
    png = tmp_path / "x.png"
    Image.new("RGB", (40, 30), (200, 10, 10)).save(png)  # ImageNet holds a PNG named .JPEG
    w, h, handle = turbo.open(png.read_bytes(), "x.png")
    arr, s = turbo.decode(handle, "x.png", 2)
    assert (w, h, s) == (40, 30, 1) and arr.shape == (30, 40, 3) and arr[0, 0, 0] == 200
    cut = sample_files()[0].read_bytes()
    with pytest.raises(BadImage, match="not a readable image"):
        w, h, handle = turbo.open(cut[: len(cut) // 2], "cut.JPEG")
        turbo.decode(handle, "cut.JPEG", 1)


def test_a_missing_decoder_is_a_one_line_error_never_a_fall_back(no_simplejpeg, tmp_path, capsys,
                                                                  monkeypatch):
    with pytest.raises(DecoderUnavailable, match=r"simplejpeg package is not installed; pip install"):
        jpeg_turbo.get_decoder("simplejpeg")
    with pytest.raises(DecoderUnavailable):
        ImageNetLoader(ImageFolder(sample_tree(tmp_path) / "train"), global_batch=4, seed=0,
                       decoder="simplejpeg")
    # the command line: one line, exit 2, before the folders are read
    monkeypatch.setattr(imagenet_cli, "ImageNetTask", lambda *a, **k: pytest.fail("a task was built"))
    code = imagenet.main(["--data-dir", str(tmp_path), "--out", str(tmp_path / "out"),
                          "--decoder", "simplejpeg", "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "--decoder simplejpeg: the simplejpeg package is not installed" in err
    assert "--decoder pil" in err and not (tmp_path / "out").exists()


def test_an_unknown_decoder_is_refused():
    with pytest.raises(DecoderUnavailable, match="--decoder turbo: unknown"):
        jpeg_turbo.get_decoder("turbo")
    with pytest.raises(SystemExit):
        imagenet_cli.build_parser().parse_args(["--decoder", "turbo"])


def test_the_flag_and_the_config_agree(capsys):
    args = imagenet_cli.build_parser().parse_args(["--decoder", "simplejpeg", "--no-preflight"])
    args.given = {"decoder", "no_preflight"}
    cfg = imagenet_cli.config_from_args(args)
    assert (cfg.decoder, cfg.preflight_seconds) == ("simplejpeg", 0.0)
    assert imagenet.main(["--show-config"]) == 0
    assert '"decoder": "pil"' in capsys.readouterr().out  # the default, in run.json's config too
