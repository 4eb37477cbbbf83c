"""Recipe configs from the command line: ``--set name=value`` for any field of
a dataclass config, and one-line validation errors that name the field.

Every trainer keeps its whole recipe in one dataclass; this module is what lets
a user change any field without the CLI growing a flag per hyperparameter.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Iterable
from typing import Any, TypeVar

from dawnbench_fast.config.precision import PRECISIONS
from dawnbench_fast.dispatch import KERNEL_CHOICES

C = TypeVar("C")


class ConfigError(ValueError):
    """A bad configuration value, in one line naming the flag."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag or value is one line on stderr and exit 2."""

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(2)


def finite_float(text: str) -> float:
    """argparse ``type`` of every float flag: ``float()`` reads "nan", "inf"
    and "-inf", which pass range checks written as ``x > 0`` (inf) or ones a
    flag has none of (nan), and a budget or price of either is no number to
    run with; argparse turns the refusal into its one-line error naming the flag."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text}: must be a finite number")
    return value


def parse_value(name: str, text: str, current: object, declared: object = None) -> object:
    """Parse ``--set name=text`` by the type of the field's current value (or
    its ``declared`` type where that is float: ``epochs: float = 8``)."""
    if isinstance(current, bool):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"--set {name}={text}: expected true or false")
    try:
        if declared in (float, "float") and isinstance(current, int | float):
            return float(text)
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
        if isinstance(current, tuple):  # empty: none (progressive= switches the curriculum off)
            return tuple(int(v) for v in text.split(",")) if text.strip() else ()
    except ValueError:
        kind = "comma-separated integers" if isinstance(current, tuple) else type(current).__name__
        raise ConfigError(f"--set {name}={text}: expected {kind}") from None
    if current is None or isinstance(current, str):
        return None if text.lower() == "none" else text
    raise ConfigError(f"--set {name}: this field cannot be set from the command line")


def apply_overrides(cfg: C, pairs: Iterable[str], frozen: Iterable[str] = ("extra",)) -> C:
    """``cfg`` with each ``name=value`` of ``pairs`` applied, in order. Fields in
    ``frozen`` (free-form ones such as notes) cannot be set. Not validated: the
    recipe's own check runs after."""
    declared = {f.name: f.type for f in dataclasses.fields(cfg)}  # type: ignore[arg-type]
    names = set(declared) - set(frozen)
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set {pair}: expected name=value")
        name, text = pair.split("=", 1)
        if name not in names:
            raise ConfigError(f"--set {name}: unknown field; known: {', '.join(sorted(names))}")
        value = parse_value(name, text, getattr(cfg, name), declared[name])
        cfg = dataclasses.replace(cfg, **{name: value})  # type: ignore
    return cfg


# Config fields that also have a flag of their own: an error names the flag the
# user most likely typed (``--epochs 0``), the others the ``--set`` that sets them.
FLAGS = {
    "epochs": "--epochs", "batch_size": "--batch-size", "seed": "--seed", "target": "--target",
    "eval_every": "--eval-every", "show_every": "--show-every", "subset": "--subset",
    "eval_subset": "--eval-subset",
    "device": "--device", "kernels": "--kernels", "threads": "--threads", "precision": "--precision",
}


def _named(cfg: Any, name: str) -> str:
    """How an error names field ``name`` and its value: ``--epochs 0``,
    ``--set tta_level=7``, or the bare name of a check spanning fields."""
    if not hasattr(cfg, name):
        return name
    value = getattr(cfg, name)
    return f"{FLAGS[name]} {value}" if name in FLAGS else f"--set {name}={value}"


def check(cfg: Any, checks: Iterable[tuple[bool, str, str]]) -> None:
    """Raise ConfigError for the first failed ``(ok, field, why)``, naming the
    flag (or ``--set``) and its value: ``--epochs 0: must be > 0``."""
    for ok, name, why in checks:
        if not ok:
            raise ConfigError(f"{_named(cfg, name)}: {why}")


def common_checks(cfg: Any) -> list[tuple[bool, str, str]]:
    """The checks of the fields every recipe's config has: the loop's (epochs,
    batch_size, subsets, target, eval_every, seed) and the execution's
    (precision, kernels, threads). A recipe adds its own and passes them all to
    :func:`check`. Written so that nan fails (comparisons with nan are false).
    Last, every float field must be finite: ``float()`` reads "nan", "inf"
    and "-inf" (and JSON's NaN and Infinity, in --config files), and a range
    check alone lets inf through (``epochs > 0``) or a field without one take
    nan into the training (the recipe's own checks come after these)."""
    return [
        (cfg.epochs > 0, "epochs", "must be > 0"),
        (cfg.batch_size >= 1, "batch_size", "must be >= 1"),
        (cfg.subset >= 0, "subset", "must be >= 0 (0 = all images)"),
        (cfg.eval_subset >= 0, "eval_subset", "must be >= 0 (0 = all images)"),
        (cfg.precision in PRECISIONS, "precision", "must be auto, bf16, fp16 or fp32"),
        (cfg.kernels in KERNEL_CHOICES, "kernels", f"must be one of {KERNEL_CHOICES}"),
        (0.0 < cfg.target <= 1.0, "target", "must be in (0, 1], a fraction: 0.94 means 94%"),
        (cfg.eval_every >= 0, "eval_every", "must be >= 0 (0 = final epoch only)"),
        (cfg.show_every >= 0, "show_every", "must be >= 0 (0 = no display-only evaluations)"),
        # numpy's generators (the epoch order, the augmentation) take no negative seeds;
        # without this a negative seed would fail only after the warm-up.
        (cfg.seed >= 0, "seed", "must be >= 0"),
        (cfg.threads >= 0, "threads", "must be >= 0 (0 = all cores)"),
        *((math.isfinite(value), f.name, "must be a finite number")
          for f in dataclasses.fields(cfg) if isinstance(value := getattr(cfg, f.name), float)),
    ]
