"""CIFAR-10 readers: both layouts, lookup order, and every error path."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from support.cifar_data import cifar, cifar_dir

from dawnbench_fast.data import cifar10 as C


def test_binary_layout_reads_the_original_files():
    ds = cifar()
    assert ds.layout == "binary" and ds.verified
    assert ds.train_images.shape == (50000, 32, 32, 3) and ds.train_images.dtype == np.uint8
    assert ds.test_images.shape == (10000, 32, 32, 3)
    assert np.bincount(ds.train_labels).tolist() == [5000] * 10
    assert np.bincount(ds.test_labels).tolist() == [1000] * 10
    # Facts from SOURCE.txt: first train record is a frog whose red channel starts 59,43,50.
    assert ds.train_labels[0] == 6 and ds.train_images[0, 0, :3, 0].tolist() == [59, 43, 50]
    assert ds.test_labels[0] == 3 and ds.test_images[0, 0, :3, 0].tolist() == [158, 159, 165]
    mean = ds.train_images.reshape(-1, 3).mean(0) / 255
    np.testing.assert_allclose(mean, C.MEAN, atol=1e-4)


def test_each_file_lands_in_its_place_with_its_labels():
    """The files are read side by side into one array: each file's images
    and labels, read here one record at a time, sit where the file order puts them."""
    ds = cifar()
    for i, name in enumerate(C.TRAIN_FILES + C.TEST_FILES):
        raw = np.fromfile(cifar_dir() / f"{name}.bin", dtype=np.uint8).reshape(-1, C.RECORD_BYTES)
        images, labels = (ds.test_images, ds.test_labels) if name in C.TEST_FILES else (
            ds.train_images[i * C.IMAGES_PER_FILE:], ds.train_labels[i * C.IMAGES_PER_FILE:])
        for j in (0, 4321, C.IMAGES_PER_FILE - 1):
            assert labels[j] == raw[j, 0], (name, j)
            planes = raw[j, 1:].reshape(3, 32, 32)  # the publisher's record: R, G, B planes
            assert np.array_equal(images[j], np.moveaxis(planes, 0, -1)), (name, j)


def make_pickle_layout(src: Path, dst: Path) -> Path:
    """Write torchvision's cifar-10-batches-py layout from the binary files."""
    folder = dst / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in C.TRAIN_FILES + C.TEST_FILES:
        raw = np.fromfile(src / f"{name}.bin", dtype=np.uint8).reshape(-1, C.RECORD_BYTES)
        entry = {"batch_label": name, "labels": raw[:, 0].tolist(), "data": raw[:, 1:].copy()}
        with open(folder / name, "wb") as f:
            pickle.dump(entry, f)
    return folder


def test_pickle_layout_equals_binary_layout(tmp_path):
    make_pickle_layout(cifar_dir(), tmp_path)
    ds = C.load_cifar10(tmp_path, allow_download=False)
    ref = cifar()
    assert ds.layout == "pickle"
    assert not ds.verified  # re-pickled files are valid but not byte-identical to the originals
    np.testing.assert_array_equal(ds.train_images, ref.train_images)
    np.testing.assert_array_equal(ds.train_labels, ref.train_labels)
    np.testing.assert_array_equal(ds.test_images, ref.test_images)
    np.testing.assert_array_equal(ds.test_labels, ref.test_labels)


def linked_copy(tmp_path: Path) -> Path:
    """A folder of symlinks to the real files, so one can be replaced cheaply."""
    d = tmp_path / "c10"
    d.mkdir()
    for f in cifar_dir().iterdir():
        os.symlink(f, d / f.name)
    return d


def one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_missing_file_names_it(tmp_path):
    d = linked_copy(tmp_path)
    (d / "data_batch_3.bin").unlink()
    with pytest.raises(C.DataError) as e:
        C.load_cifar10(d, allow_download=False)
    msg = one_line(e)
    assert "data_batch_3.bin" in msg and "missing" in msg and "--data-dir" in msg


def test_truncated_file_names_it(tmp_path):
    d = linked_copy(tmp_path)
    (d / "test_batch.bin").unlink()
    with open(cifar_dir() / "test_batch.bin", "rb") as f:
        (d / "test_batch.bin").write_bytes(f.read(C.BIN_FILE_BYTES - 3073))
    with pytest.raises(C.DataError) as e:
        C.load_cifar10(d, allow_download=False)
    assert "test_batch.bin" in one_line(e) and "truncated" in str(e.value)


def test_corrupt_file_fails_md5(tmp_path):
    d = linked_copy(tmp_path)
    (d / "data_batch_2.bin").unlink()
    shutil.copy(cifar_dir() / "data_batch_2.bin", d / "data_batch_2.bin")
    with open(d / "data_batch_2.bin", "r+b") as f:
        f.seek(12345)
        b = f.read(1)
        f.seek(12345)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(C.DataError) as e:
        C.load_cifar10(d, allow_download=False)
    assert "data_batch_2.bin" in one_line(e) and "MD5" in str(e.value)


def test_of_two_bad_files_the_first_in_file_order_is_named(tmp_path):
    """The files are read side by side, but the error is the one a read in
    file order meets first: here a corrupt byte in data_batch_1 (found after
    hashing the whole file) before data_batch_2, which is missing (found at
    once, while data_batch_1 is still being read beside it)."""
    d = linked_copy(tmp_path)
    (d / "data_batch_1.bin").unlink()
    raw = bytearray((cifar_dir() / "data_batch_1.bin").read_bytes())
    raw[C.BIN_FILE_BYTES - 1] ^= 0xFF
    (d / "data_batch_1.bin").write_bytes(raw)
    (d / "data_batch_2.bin").unlink()
    with pytest.raises(C.DataError) as e:
        C.load_cifar10(d, allow_download=False)
    assert "data_batch_1.bin" in one_line(e) and "MD5" in str(e.value), str(e.value)


def test_corrupt_pickle_names_it(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "data_batch_1").write_bytes(b"\x80\x04garbage")
    with pytest.raises(C.DataError) as e:
        C.load_cifar10(tmp_path, allow_download=False)
    assert "data_batch_1" in one_line(e) and "corrupt" in str(e.value)


def test_lookup_order(tmp_path, monkeypatch):
    data = cifar_dir()  # before $DAWNBENCH_DATA changes below (the checkout may have no shared/ beside it)
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("DAWNBENCH_DATA", str(data))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # --data-dir wins over $DAWNBENCH_DATA, and a wrong one is an error, not a fallback.
    with pytest.raises(C.DataError) as e:
        C.locate(empty, allow_download=False)
    assert "--data-dir" in one_line(e)
    assert C.locate(None, allow_download=False) == (data, "binary")
    monkeypatch.setenv("DAWNBENCH_DATA", str(empty))
    with pytest.raises(C.DataError) as e:
        C.locate(None, allow_download=False)
    assert "DAWNBENCH_DATA" in one_line(e)
    # Then the per-user cache.
    monkeypatch.delenv("DAWNBENCH_DATA")
    cached = C.cache_dir() / "cifar-10-batches-bin"
    cached.parent.mkdir(parents=True)
    os.symlink(data, cached)
    assert C.locate(None, allow_download=False) == (cached, "binary")


def test_no_download_and_no_network_are_one_line_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("DAWNBENCH_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(C.DataError) as e:
        C.locate(None, allow_download=False)
    assert "--no-download" in one_line(e) and "--data-dir" in str(e.value)
    # A download that cannot connect (closed local port) says how to point at a copy.
    monkeypatch.setattr(C, "ARCHIVE_URL", "http://127.0.0.1:9/cifar-10-binary.tar.gz")
    with pytest.raises(C.DataError) as e:
        C.download(C.cache_dir(), url=C.ARCHIVE_URL, timeout=2)
    assert "--data-dir" in one_line(e)
    assert not (C.cache_dir() / "cifar-10-batches-bin").exists()


@pytest.fixture
def served_archive(tmp_path):
    """A small .tar.gz holding cifar-10-batches-bin/, served on loopback."""
    import http.server
    import tarfile
    import threading

    src = tmp_path / "srv" / "cifar-10-batches-bin"
    src.mkdir(parents=True)
    (src / "batches.meta.txt").write_text("airplane\n")
    archive = tmp_path / "srv" / "cifar-10-binary.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname="cifar-10-batches-bin")
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(  # noqa: E731
        *a, directory=str(archive.parent), **k
    )
    http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/{archive.name}", C.md5sum(archive)
    server.shutdown()


def test_download_checks_md5_then_unpacks_atomically(tmp_path, monkeypatch, served_archive):
    url, md5 = served_archive
    dest = tmp_path / "cache"
    with pytest.raises(C.DataError) as e:  # the real archive's MD5 does not match
        C.download(dest, url=url)
    assert "MD5" in one_line(e)
    assert not (dest / "cifar-10-batches-bin").exists()
    monkeypatch.setattr(C, "ARCHIVE_MD5", md5)
    folder = C.download(dest, url=url)
    assert folder == dest / "cifar-10-batches-bin"
    assert (folder / "batches.meta.txt").read_text() == "airplane\n"
    assert [p.name for p in dest.iterdir()] == ["cifar-10-batches-bin"]  # no temp left behind


# -- placed off the clock, prepared on it --------------------------------------------


def _host_prepared(ds: C.Cifar10, n: int, m: int, pad: int, whiten: int):
    """The earlier host path, the specification: numpy's reflect pad and normalisation."""
    from dawnbench_fast.data import augment as aug

    scale, shift = aug.normalisation(C.MEAN, C.STD)
    norm = lambda u8: (u8.astype(np.float32) * scale + shift).transpose(0, 3, 1, 2)  # noqa: E731
    padded = np.pad(ds.train_images[:n], ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="reflect")
    return padded, norm(ds.test_images[:m]), norm(ds.train_images[:whiten])


@pytest.mark.parametrize("pad", [0, 1, 2, 5])
def test_prepare_on_the_device_equals_the_host_path_bit_for_bit(pad):
    import dataclasses

    import torch

    from dawnbench_fast.cifar import Config
    from dawnbench_fast.data.cifar10_device import place_data

    ds = cifar()
    cfg = dataclasses.replace(Config(), subset=257, eval_subset=131, batch_size=128, translate=pad,
                              whiten_images=97)
    data = place_data(ds, cfg, torch.device("cpu"))
    assert not data.prepared  # nothing derived yet, but its memory allocated: prepare writes into it
    memory = [t.data_ptr() for t in (data.padded, data.test_x, data.whiten_x)]
    data.prepare()
    assert [t.data_ptr() for t in (data.padded, data.test_x, data.whiten_x)] == memory
    padded, test_x, whiten_x = _host_prepared(ds, 257, 131, pad, 97)
    np.testing.assert_array_equal(data.padded.numpy(), padded)
    assert data.padded.dtype == torch.uint8 and data.padded.is_contiguous()
    np.testing.assert_array_equal(data.test_x.numpy(), test_x)
    np.testing.assert_array_equal(data.whiten_x.numpy(), whiten_x)
    assert data.test_x.is_contiguous(memory_format=torch.channels_last)


def test_pad_reflect_refuses_a_pad_the_images_cannot_reflect():
    import torch

    from dawnbench_fast.data import augment as aug

    with pytest.raises(ValueError, match="larger than 4 px"):
        aug.pad_reflect(torch.zeros(1, 4, 4, 3, dtype=torch.uint8), 4)


def test_the_data_preparation_runs_inside_the_clock(monkeypatch):
    """The task's init (the clock's ``init`` phase) pads and normalises, every
    run: the published recipe does that work inside its timed region."""
    import dataclasses

    import torch

    from dawnbench_fast.cifar import CifarTask, Config
    from dawnbench_fast.data.cifar10_device import DeviceData, place_data
    from dawnbench_fast.training import train

    cfg = dataclasses.replace(Config(), subset=64, eval_subset=64, batch_size=32, epochs=1, whiten_images=32,
                              kernels="torch", tta_level=0, compile="off")
    data = place_data(cifar(), cfg, torch.device("cpu"))
    now = [0.0]
    real = DeviceData.prepare

    def prepare(self: DeviceData) -> DeviceData:
        now[0] += 1000.0  # a preparation that costs 1000 s of the test's clock
        return real(self)

    monkeypatch.setattr(DeviceData, "prepare", prepare)
    phases = train.Phases(torch.device("cpu"), timer=lambda: now[0])
    train.train(CifarTask(cfg, data, torch.device("cpu"), "torch"), phases, progress=False)
    assert phases.seconds["init"] == 1000.0 and phases.clock == 1000.0
    assert data.whiten_x is not None and len(data.whiten_x) == 32
