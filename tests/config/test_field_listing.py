"""``--list-fields`` (dawnbench_fast.config.fields): every recipe field of both
trainers listed with its type, default and a description taken from the
recipe's own comments."""

from __future__ import annotations

import dataclasses
import re

import pytest

from dawnbench_fast import cifar, imagenet
from dawnbench_fast.config import fields

TRAINERS = {"cifar": (cifar.main, cifar.Config), "imagenet": (imagenet.main, imagenet.Config)}


@pytest.mark.parametrize("name", list(TRAINERS))
def test_every_recipe_field_has_a_description(name):
    _, config = TRAINERS[name]
    docs = fields.field_docs(config)
    assert [d.name for d in docs] == [f.name for f in dataclasses.fields(config)]
    bare = [d.name for d in docs if not d.description.strip()]
    assert not bare, f"{name}: fields without a comment in the recipe: {bare}"
    assert all(d.type for d in docs)


@pytest.mark.parametrize("name", list(TRAINERS))
def test_list_fields_prints_every_field_and_exits_0(name, capsys, tmp_path):
    main, config = TRAINERS[name]
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("earlier")
    # reads no data and writes nothing, so even a non-empty --out is no error
    code = main(["--list-fields", "--set", "seed=3", "--out", str(full)])
    out = capsys.readouterr().out
    assert code == 0
    heads = dict(re.findall(r"^(\w+): (.+)$", out, re.M))
    assert set(heads) == {f.name for f in dataclasses.fields(config)}
    assert heads["seed"] == "int = 0   (this command: 3)"
    assert "epochs: float = " in out


def test_the_listing_shows_the_named_recipe_beside_the_default(capsys):
    assert cifar.main(["--list-fields", "--recipe", "airbench94_muon"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^batch_size: int = 1536   \(this command: 2000\)$", out, re.M)
    assert re.search(r"^widths: tuple\[int, int, int\] = 64,256,256$", out, re.M)
    assert re.search(r"^data_dir: str \| None = none", out, re.M)


def test_a_bad_set_beside_list_fields_is_the_usual_one_line_error(capsys):
    assert imagenet.main(["--list-fields", "--set", "nope=1"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@dataclasses.dataclass
class _Sample:
    # -- a section rule names a group, not the next field --
    plain: int = 1
    trailing: float = 2.0  # the trailing comment
    # a block right above
    # in two lines
    block: str = "x"
    # a block above a field with its own comment
    both: bool = True  # its own comment wins
    tup: tuple[int, ...] = dataclasses.field(default_factory=tuple)


def test_which_comment_describes_a_field():
    docs = {d.name: d for d in fields.field_docs(_Sample)}
    assert docs["plain"].description == ""  # what the recipe test above would report
    assert docs["trailing"].description == "the trailing comment"
    assert docs["block"].description == "a block right above in two lines"
    assert docs["both"].description == "its own comment wins"
    assert (docs["tup"].type, docs["tup"].default) == ("tuple[int, ...]", ())
