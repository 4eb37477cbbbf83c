"""A configuration the data cannot honour is refused, never silently changed
to fit: a batch larger than the training (sub)set was cut to its size, a
whitening sample larger than it took what there was, a progressive crop
larger than the images trained on the whole image, and a run too short for a
step evaluated an untrained net. The command line's cases (one line, exit 2,
nothing written) are in tests/runner/test_bad_inputs.py's matrix; here the
step count's own refusal, through the CLI and the library, which builds the
task without the CLI's data check. The one change made, and said: ``--subset
N`` as a smoke flag takes the recipe's own batch and whitening sample down to
N where they are larger; a value the user set is refused as before."""

from __future__ import annotations

import json

import pytest
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast import cifar
from dawnbench_fast.cifar import train_state as cifar_train_state
from dawnbench_fast.cifar.recipe import fit_subset
from dawnbench_fast.cifar.task import Config
from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.runner import runs
from dawnbench_fast.training.task import epoch_steps

TINY = ["--no-download", "--no-progress", "--kernels", "torch", "--subset", "1000", "--set",
        "whiten_images=1000", "--batch-size", "500", "--eval-subset", "200", "--latency-images", "0"]


def test_an_epoch_of_no_step_is_refused():
    assert epoch_steps(7.63, lambda e: 32) == [32] * 7 + [21]
    with pytest.raises(ConfigError, match=r"^--epochs 1e-10: too short for a single training step"):
        epoch_steps(1e-10, lambda e: 5)  # no epoch at all (was an IndexError)
    with pytest.raises(ConfigError, match=r"^--epochs 2.00000001: its last, partial epoch \(1e-08 of one\)"):
        epoch_steps(2.00000001, lambda e: 10)  # a third epoch of no step, evaluated as if trained
    with pytest.raises(ConfigError, match=r"^--epochs 3: epoch 2 takes no training step .*--batch-size"):
        epoch_steps(3, lambda e: 0 if e == 1 else 4)  # a pruned epoch with fewer images than a batch


@pytest.mark.parametrize("epochs", ["1e-10", "2.00000001"])
def test_a_run_too_short_for_a_step_is_one_line_before_any_model(tmp_path, capsys, monkeypatch, epochs):
    def tripwire(*args, **kwargs):
        raise AssertionError("a model was built before the error")
    monkeypatch.setattr(cifar_train_state, "build_model", tripwire)
    monkeypatch.setattr(runs, "warm_up", tripwire)
    out = tmp_path / "out"
    code = cifar.main([*TINY, "--data-dir", str(cifar_dir()), "--out", str(out), "--epochs", epochs])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"{cifar.PROG}: error: --epochs {epochs}: ") and "step" in err[0], err[0]
    assert not out.exists()


def _small(**fields) -> Config:
    return Config(subset=100, eval_subset=100, whiten_images=100, widths=(8, 8, 8), data_dir=str(cifar_dir()),
                  download=False, device="cpu", kernels="torch", precision="fp32", **fields)


def test_the_library_refuses_what_the_data_cannot_honour_too():
    # Config.build_task (train.loss_trajectory's path) builds the task without the CLI's check
    with pytest.raises(ConfigError, match=r"^--batch-size 101: larger than the 100 training images"):
        _small(batch_size=101).build_task(torch.device("cpu"))
    # pruning half of the lower half of 100 images leaves 75 for epoch 2: no whole batch of 100
    with pytest.raises(ConfigError, match=r"^--epochs 2: epoch 2 takes no training step"):
        _small(batch_size=100, epochs=2, prune=0.5).build_task(torch.device("cpu"))
    assert _small(batch_size=100, epochs=2).build_task(torch.device("cpu")).epoch_steps == [1, 1]


SMOKE = ["--no-download", "--no-progress", "--subset", "500", "--eval-subset", "100", "--epochs", "1",
         "--device", "cpu", "--latency-images", "2"]


def _show_config(tmp_path, capsys, *flags: str) -> tuple[dict, list[str]]:
    """The config the command line would run (``--show-config``: its own path, then exit) and stderr."""
    code = cifar.main([*SMOKE, "--data-dir", str(cifar_dir()), "--out", str(tmp_path / "out"),
                       "--show-config", *flags])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out), captured.err.strip().splitlines()


def test_a_smoke_subset_takes_the_recipe_s_batch_and_whitening_down_to_it(tmp_path, capsys):
    d = Config()
    cfg, err = _show_config(tmp_path, capsys)
    assert (cfg["subset"], cfg["batch_size"], cfg["whiten_images"]) == (500, 500, 500)
    assert err == [f"note: --subset 500: batch_size 500 and whiten_images 500 (the recipe's {d.batch_size} "
                   f"and {d.whiten_images} do not fit)"]
    # only what does not fit is taken down; a value the user set that fits stays
    cfg, err = _show_config(tmp_path, capsys, "--subset", "2000")
    assert (cfg["batch_size"], cfg["whiten_images"]) == (d.batch_size, 2000)
    assert err == [f"note: --subset 2000: whiten_images 2000 (the recipe's {d.whiten_images} does not fit)"]
    cfg, err = _show_config(tmp_path, capsys, "--batch-size", "250")
    assert (cfg["batch_size"], cfg["whiten_images"]) == (250, 500) and "whiten_images 500" in err[0]
    # a named recipe's values too (airbench94_muon: batch 2000)
    cfg, err = _show_config(tmp_path, capsys, "--recipe", "airbench94_muon", "--set", "whiten_images=100")
    assert (cfg["batch_size"], cfg["whiten_images"]) == (500, 100)
    assert err == ["note: --subset 500: batch_size 500 (the recipe's 2000 does not fit)"]
    # the full set: nothing changed, nothing said
    cfg, err = _show_config(tmp_path, capsys, "--subset", "0")
    assert (cfg["batch_size"], cfg["whiten_images"], err) == (d.batch_size, d.whiten_images, [])


@pytest.mark.parametrize("flags,line", [
    (["--batch-size", "1000"],
     "--batch-size 1000: larger than the 500 training images of --subset; pass at most 500 "
     "(or a larger --subset)"),
    (["--set", "whiten_images=600"],
     "--set whiten_images=600: more than the 500 training images of --subset; pass at most --set "
     "whiten_images=500 (or a larger --subset)"),
])
def test_a_value_the_user_set_larger_than_the_subset_is_still_refused(tmp_path, capsys, monkeypatch, flags,
                                                                      line):
    def tripwire(*args, **kwargs):
        raise AssertionError("a model was built before the error")
    monkeypatch.setattr(cifar_train_state, "build_model", tripwire)
    monkeypatch.setattr(runs, "warm_up", tripwire)
    out = tmp_path / "out"
    code = cifar.main([*SMOKE, "--data-dir", str(cifar_dir()), "--out", str(out), *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"{cifar.PROG}: error: {line}"]
    assert not out.exists()


def test_fit_subset_leaves_a_config_without_a_subset_or_with_a_refused_value_alone():
    cfg = Config(subset=300)
    fitted, note = fit_subset(cfg)
    assert (fitted.batch_size, fitted.whiten_images) == (300, 300) and note is not None
    assert fit_subset(Config()) == (Config(), None)
    assert fit_subset(Config(subset=300, batch_size=200), {"batch_size"})[0].batch_size == 200
    # the data check refuses the user's batch, alone: no note
    assert fit_subset(Config(subset=300, batch_size=400), {"batch_size"}) == (
        Config(subset=300, batch_size=400, whiten_images=300), None)
