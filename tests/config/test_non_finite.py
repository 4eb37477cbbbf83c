"""Non-finite numbers in a configuration: ``float()`` reads "nan",
"inf" and "-inf", and Python's json module reads NaN, Infinity and 1e999, so
every float field of both recipes, given any of them by ``--set`` or in a
``--config`` file, must be refused in one line naming the field, never
trained with. The CLI cases are in tests/runner/test_bad_inputs.py."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from dawnbench_fast.cifar import recipe as cifar_recipe
from dawnbench_fast.cifar.task import Config as CifarConfig
from dawnbench_fast.config import config_file
from dawnbench_fast.config.overrides import FLAGS, ConfigError
from dawnbench_fast.imagenet import recipe as imagenet_recipe
from dawnbench_fast.imagenet.task import Config as ImageNetConfig

RECIPES = {"cifar": (CifarConfig, cifar_recipe), "imagenet": (ImageNetConfig, imagenet_recipe)}


def float_fields(config_type: type) -> list[str]:
    """The fields a recipe holds as floats (``epochs: float = 8`` counts: declared float)."""
    return [f.name for f in dataclasses.fields(config_type)
            if f.type in (float, "float") or isinstance(getattr(config_type(), f.name), float)]


CASES = [(recipe, name) for recipe, (config_type, _) in RECIPES.items() for name in float_fields(config_type)]


def test_every_recipe_has_float_fields():
    # the matrix below is not empty by accident: lr_filters, epochs, target ...
    assert {"lr_filters", "epochs", "target", "brightness"} <= set(float_fields(CifarConfig))
    assert {"lr_per_256", "epochs", "preflight_seconds"} <= set(float_fields(ImageNetConfig))


@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
@pytest.mark.parametrize(("recipe", "name"), CASES)
def test_set_refuses_a_non_finite_float_field(recipe, name, text):
    config_type, module = RECIPES[recipe]
    with pytest.raises(ConfigError) as refused:
        module.apply_overrides(config_type(), [f"{name}={text}"])
    line = str(refused.value)
    named = f"{FLAGS[name]} " if name in FLAGS else f"--set {name}="
    assert line.startswith(named) and "\n" not in line, line
    # target and epochs are refused by their own range (nan fails every comparison), the rest as not finite
    assert "must be a finite number" in line or name in ("target", "epochs"), line


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
@pytest.mark.parametrize(("recipe", "name"), CASES)
def test_a_config_file_refuses_a_non_finite_float_field(recipe, name, literal, tmp_path):
    config_type, module = RECIPES[recipe]
    path = tmp_path / "config.json"
    path.write_text(f'{{"{name}": {literal}}}')
    args = argparse.Namespace(config=str(path), given=set())
    with pytest.raises(ConfigError) as refused:
        config_file.from_file(args, config_type, module.validate)
    line = str(refused.value)
    assert line.startswith(f"--config {path}: field {name}="), line


def test_finite_values_still_pass(tmp_path):
    # the check refuses only what is not finite: the recipes' own values, and large finite ones
    for config_type, module in RECIPES.values():
        module.validate(config_type())
    cfg = cifar_recipe.apply_overrides(CifarConfig(), ["lr_filters=1e300", "epochs=2.5"])
    assert cfg.lr_filters == 1e300 and cfg.epochs == 2.5
    (tmp_path / "c.json").write_text(json.dumps({"lr_head": 0.5}))
    args = argparse.Namespace(config=str(tmp_path / "c.json"), given=set())
    assert config_file.from_file(args, CifarConfig, cifar_recipe.validate).lr_head == 0.5
