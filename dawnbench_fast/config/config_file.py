"""``--config FILE``: a recipe config read back from what ``--show-config``
printed or what a run recorded (run.json's ``config``, summary.json's), so
that a run can be repeated exactly; the flags given on the same command line
override the file, ``--set`` last of all.

Which flags were *given* (rather than left at their defaults) is what lets
``--config run.json --seed 0`` mean seed 0 even though 0 is the default:
:func:`parse_args` records them in ``args.given``.

Every mistake in the file is a one-line ConfigError naming the file and the
field (exit status 2 in the CLI), before any data is read.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dawnbench_fast.config.overrides import FLAGS, ConfigError

_UNSET = object()

# Flags that set the config field of the same name (cli's shared flags and
# the data flags every recipe has); with --config, those given override the file.
FIELD_FLAGS = ("epochs", "batch_size", "seed", "target", "eval_every", "show_every", "subset",
               "eval_subset", "device", "kernels", "threads", "precision", "deterministic", "data_dir")



def compile_choice(flag: bool | None) -> str:
    """The config value of ``--compile`` / ``--no-compile`` (None: neither given)."""
    return "auto" if flag is None else ("on" if flag else "off")


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)`` plus ``given``: the dests the command line set."""
    args = parser.parse_args(argv)
    # argparse fills in a default only where the namespace lacks the attribute,
    # so a namespace of sentinels shows which dests the command line set.
    # List-valued dests (--set, appended to) always apply and are left out.
    dests = {act.dest for act in parser._actions if not isinstance(getattr(args, act.dest, None), list)}
    probe = parser.parse_args(argv, namespace=argparse.Namespace(**dict.fromkeys(dests, _UNSET)))
    args.given = {d for d in dests if getattr(probe, d, _UNSET) is not _UNSET}
    return args


def read_config(path: str, config_type: type) -> dict[str, Any]:
    """The config fields in ``path`` (a --show-config output, or a run.json or
    summary.json whose ``config`` it takes), checked against ``config_type``'s
    fields and types; JSON lists become the tuples the config holds."""
    data = _read_json(path)
    if isinstance(data, dict) and isinstance(data.get("config"), dict):
        data = data["config"]  # run.json, summary.json: no recipe has a field named "config"
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a JSON object of config fields (what --show-config "
                          "prints) or a run.json")
    fields = {f.name: f for f in dataclasses.fields(config_type)}
    defaults = config_type()
    for name in data:
        if name not in fields:
            raise ConfigError(f"--config {path}: unknown field {name!r} (--show-config lists the fields)")
    return {name: _typed(path, name, value, getattr(defaults, name), fields[name].type)
            for name, value in data.items()}


def _read_json(path: str) -> Any:
    p = Path(path)
    if p.is_dir():
        hint = f"; pass {p / 'run.json'}" if (p / "run.json").exists() else ""
        raise ConfigError(f"--config {path}: is a folder, not a file{hint}")
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file; pass a file saved from --show-config "
                          "or a run's run.json") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--config {path}: cannot be read ({type(e).__name__})") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"--config {path}: not JSON (line {e.lineno}: {e.msg})") from None


def _typed(path: str, name: str, value: Any, default: Any, declared: Any) -> Any:
    """``value`` as field ``name`` holds it, or the one-line error."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(default, bool):
        ok, kind = isinstance(value, bool), "true or false"
    elif declared in (float, "float") or isinstance(default, float):
        ok, kind = number, "a number"  # an int stays an int: epochs 8 is written as 8
    elif isinstance(default, int):
        ok, kind = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif isinstance(default, tuple):
        ok, kind = isinstance(value, list) and all(isinstance(v, int) for v in value), "a list of integers"
        value = tuple(value) if ok else value
    elif isinstance(default, dict):
        ok, kind = isinstance(value, dict), "an object"
    else:  # str, or str | None (data_dir)
        ok, kind = isinstance(value, str) or (value is None and default is None), "a string"
    if not ok:
        raise ConfigError(f"--config {path}: field {name!r} is {json.dumps(value)}, expected {kind}")
    return value


def in_file(path: str, error: ConfigError) -> ConfigError:
    """A recipe check's error about a value that came from the file: it names
    the file and the field, not the flag (``--epochs 0``, ``--set tta_level=7``)
    that the check assumes the value came from."""
    msg = str(error)
    for name, flag in FLAGS.items():
        if msg.startswith(f"{flag} "):
            msg = f"{name}={msg[len(flag) + 1:]}"
            break
    return ConfigError(f"--config {path}: field {msg.removeprefix('--set ')}")


def from_file(args: argparse.Namespace, config_type: type, validate: Any) -> Any:
    """``--config FILE``'s config (a ``config_type``, checked by ``validate``),
    then the flags given beside it (not --set: the caller applies those last)."""
    if "recipe" in getattr(args, "given", set()):
        raise ConfigError(f"--config {args.config} with --recipe: the file holds a whole recipe; drop "
                          "--recipe (change fields with --set)")
    cfg = config_type(**read_config(args.config, config_type))
    try:
        validate(cfg)
    except ConfigError as e:
        raise in_file(args.config, e) from None
    return dataclasses.replace(cfg, **fields_from_flags(args))


def fields_from_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The config fields set by flags given on the command line (``args.given``)."""
    given = getattr(args, "given", set())
    out = {name: getattr(args, name) for name in FIELD_FLAGS if name in given}
    if "epochs" in out:
        out["epochs"] = epochs_value(out["epochs"])
    if "no_download" in given:
        out["download"] = not args.no_download
    if "compile" in given:  # --compile / --no-compile
        out["compile"] = compile_choice(args.compile)
    return out


def epochs_value(epochs: float) -> int | float:
    """``--epochs`` (parsed as a float, for fractional lengths) as the config
    records it: an integral value as an int, so --epochs 8 is recorded as 8."""
    return int(epochs) if float(epochs).is_integer() else epochs


def recipe_fields(args: argparse.Namespace, recipes: dict[str, dict[str, Any]],
                  choice: dict[str, str] | None = None) -> dict[str, Any]:
    """The Config fields every trainer takes from the shared flags
    (cli.add_training_args, add_execution_args): the named recipe's values,
    an explicit --epochs, --batch-size or --precision winning over them, and
    the run's seed, target, device, kernels and the rest. ``choice``: where the
    trainer chose the recipe for the machine (``--recipe auto``), its record
    (``recipe``, ``requested``, ``why``), kept in ``extra``; else ``--recipe``."""
    recipe = choice["recipe"] if choice else args.recipe
    preset = {**recipes[recipe]}
    if args.epochs is not None:
        preset["epochs"] = epochs_value(args.epochs)
    for name in ("batch_size", "precision"):
        if getattr(args, name) is not None:
            preset[name] = getattr(args, name)
    return {**preset, "seed": args.seed, "target": args.target, "eval_every": args.eval_every,
            "show_every": args.show_every, "device": args.device, "kernels": args.kernels,
            "threads": args.threads,
            "deterministic": args.deterministic, "data_dir": args.data_dir,
            "extra": {"recipe": recipe, **({"recipe_choice": choice} if choice else {})},
            "compile": compile_choice(args.compile)}
