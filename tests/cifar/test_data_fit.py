"""A configuration the data cannot honour is refused, never changed to fit:
a batch larger than the training (sub)set was cut to its size, a
whitening sample larger than it took what there was, a progressive crop
larger than the images trained on the whole image, and a run too short for a
step evaluated an untrained net. The command line's cases (one line, exit 2,
nothing written) are in tests/runner/test_bad_inputs.py's matrix; here the
step count's own refusal, through the CLI and the library, which builds the
task without the CLI's data check."""

from __future__ import annotations

import pytest
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast import cifar
from dawnbench_fast.cifar import train_state as cifar_train_state
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
