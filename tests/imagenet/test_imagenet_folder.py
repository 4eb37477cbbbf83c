"""The ImageFolder layout (data/imagenet/folder.py) and the arrangement of the
flat validation folder (data/imagenet/val_layout.py): class indices are the
ILSVRC-2012 standard's, every layout mistake is one line naming the path."""

from __future__ import annotations

import os

import pytest
import torch
from support.imagenet_sample import sample_files, sample_tree, standard_index

from dawnbench_fast.data.imagenet import val_layout
from dawnbench_fast.data.imagenet.errors import BadImage, DataError
from dawnbench_fast.data.imagenet.folder import ImageFolder, open_splits
from dawnbench_fast.data.imagenet.loader import open_source
from dawnbench_fast.data.imagenet.source import ImageSource
from dawnbench_fast.data.imagenet.synthetic import make_image_folder


def test_sample_class_indices_are_the_standard_ones(tmp_path):
    root = sample_tree(tmp_path)
    train, val = open_splits(root)
    standard = standard_index()
    # the standard index is the position in the sorted list of all 1000 synsets
    assert sorted(standard) == sorted(standard, key=standard.get)
    assert len(train) == len(val) == 100 and train.classes == val.classes
    # our index of a synset ranks it among the 100 present, as its standard index does
    by_standard = sorted(train.classes, key=standard.get)
    assert train.classes == by_standard
    for i in range(len(train)):
        synset = os.path.basename(os.path.dirname(train.name(i)))
        assert train.classes[int(train.labels[i])] == synset
        assert int(train.labels[i]) == by_standard.index(synset)
    assert train.read(0) == sample_files()[0].read_bytes()
    assert isinstance(train, ImageSource)


def test_labels_and_order(tmp_path):
    make_image_folder(tmp_path, classes=3, train_per_class=4, val_per_class=2, size=24)
    train = ImageFolder(tmp_path / "train")
    assert train.labels.dtype == torch.int64
    assert train.labels.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert [os.path.basename(train.name(i)) for i in range(4)] == sorted(
        os.path.basename(train.name(i)) for i in range(4))
    assert isinstance(open_source(tmp_path / "val", classes=train.classes), ImageFolder)


def test_validation_split_uses_the_training_classes(tmp_path):
    make_image_folder(tmp_path, classes=3, train_per_class=2, val_per_class=1, size=24)
    for f in (tmp_path / "val" / "n00000000").iterdir():
        f.unlink()
    (tmp_path / "val" / "n00000000").rmdir()  # a class absent from val: its labels stay 1, 2
    _, val = open_splits(tmp_path)
    assert val.classes == ["n00000000", "n00000001", "n00000002"]
    assert val.labels.tolist() == [1, 2]


@pytest.mark.parametrize("case, expected", [
    ("missing", "no such folder"),
    ("flat", "the flat validation layout"),
    ("no_classes", "no class folders"),
    ("empty_class", "no image files"),
    ("unknown_val_class", "not one of the 2 classes"),
])
def test_layout_errors_are_one_line_naming_the_path(tmp_path, case, expected):
    make_image_folder(tmp_path, classes=2, train_per_class=1, val_per_class=1, size=16)
    target = tmp_path / "val"
    if case == "missing":
        os.rename(target, tmp_path / "validation")
    elif case == "flat":
        for f in list(target.rglob("*.JPEG")):
            os.rename(f, target / f.name)
        for d in target.iterdir():
            if d.is_dir():
                d.rmdir()
    elif case == "no_classes":
        for f in list(target.rglob("*.JPEG")):
            f.unlink()
        for d in target.iterdir():
            d.rmdir()
    elif case == "empty_class":
        (tmp_path / "train" / "n00000007").mkdir()
        target = tmp_path / "train"
    else:
        (target / "n09999999").mkdir()
    with pytest.raises(DataError) as err:
        open_splits(tmp_path)
    message = str(err.value)
    assert expected in message and "\n" not in message
    assert str(target) in message


def test_a_file_that_vanished_is_a_bad_image(tmp_path):
    make_image_folder(tmp_path, classes=1, train_per_class=2, val_per_class=1, size=16)
    train = ImageFolder(tmp_path / "train")
    os.unlink(train.name(1))
    with pytest.raises(BadImage, match="cannot be read"):
        train.read(1)


def _flat(tmp_path, n=6):
    flat = tmp_path / "flat"
    flat.mkdir()
    pairs = [(f"ILSVRC2012_val_{k:08d}.JPEG", f"n0000000{k % 3}") for k in range(1, n + 1)]
    for name, _ in pairs:
        (flat / name).write_bytes(name.encode())  # content names the file: misfiling shows
    listing = tmp_path / "val_list.csv"
    listing.write_text("# file,synset\n" + "".join(f"{f},{s}\n" for f, s in pairs) + "\n")
    return flat, listing, pairs


def test_val_layout_files_each_image_under_its_synset(tmp_path, capsys):
    flat, listing, pairs = _flat(tmp_path)
    (flat / "ILSVRC2012_val_00000099.JPEG").write_bytes(b"not listed")
    out = tmp_path / "imagenet" / "val"
    assert val_layout.main([str(listing), str(flat), str(out)]) == 0
    assert "6 linked" in capsys.readouterr().out
    for name, synset in pairs:
        assert (out / synset / name).read_bytes() == name.encode()
        assert os.path.samefile(out / synset / name, flat / name)  # a hard link
    assert sorted(p.name for p in out.iterdir()) == ["n00000000", "n00000001", "n00000002"]
    # again: nothing to do, nothing broken; --copy into a fresh folder copies
    done = val_layout.arrange(val_layout.read_list(listing), flat, out)
    assert (done.already, done.linked, done.unlisted) == (6, 0, 1)
    copied = val_layout.arrange(val_layout.read_list(listing), flat, tmp_path / "copy", copy=True)
    assert copied.copied == 6 and not os.path.samefile(tmp_path / "copy" / pairs[0][1] / pairs[0][0],
                                                       flat / pairs[0][0])


def test_val_layout_errors(tmp_path, capsys):
    flat, listing, pairs = _flat(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_text("ILSVRC2012_val_00000001.JPEG\n")
    with pytest.raises(DataError, match=r"bad.csv:1: expected 'file,synset'"):
        val_layout.read_list(bad)
    bad.write_text("a.JPEG,n1\na.JPEG,n2\n")
    with pytest.raises(DataError, match="listed again"):
        val_layout.read_list(bad)
    os.unlink(flat / pairs[2][0])
    with pytest.raises(DataError, match=r"listed but missing \(1 of 6"):
        val_layout.arrange(val_layout.read_list(listing), flat, tmp_path / "out")
    assert val_layout.main([str(listing), str(flat), str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
