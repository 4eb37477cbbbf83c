"""Behaviour pin: the torch backend's first training steps, bit for bit.

Recorded at commit 6e0596c, before the code was moved into its rooms (issue
8), so that any refactor that changes the numerics fails here. The settings
are the published recipe's (cifar.RECIPES["airbench94_muon"], Config's defaults
when it was recorded: whitening from 5,000 images, Muon + Nesterov SGD, label
smoothing, the alternating flip...) in fp32 with one
thread, except the batch (500 instead of 2,000) so that three steps take
seconds, not a minute.

Floating-point results depend on the instruction set oneDNN and ATen pick and
on the torch build, so the pin holds only where those match the recording;
elsewhere the test is skipped and says why. The CPU's model name is part of
the match: ATen reports "AVX512" on an Intel Xeon with AMX as on AMD EPYC, but
oneDNN runs other kernels there and the second step's loss differs.
"""

from __future__ import annotations

import pytest
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast.hardware.machine import cpu_model

RECORDED_AT = "6e0596c"
FINGERPRINT = {"torch": "2.13.0+cpu", "cpu_capability": "AVX512", "cpu": "AMD EPYC"}
# float.hex() of the per-example loss of steps 1, 2, 3
LOSSES = ["0x1.2880b22d0e560p+1", "0x1.1f6cc49ba5e35p+1", "0x1.17fe020c49ba6p+1"]


def _fingerprint() -> dict[str, str]:
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu": cpu_model()}


def test_torch_backend_loss_trajectory_is_unchanged():
    here = _fingerprint()
    if here != FINGERPRINT:
        pytest.skip(f"recorded at {RECORDED_AT} on {FINGERPRINT}; this machine is {here}: "
                    "bit-exact results are not comparable")
    from dawnbench_fast.cifar import RECIPES, Config
    from dawnbench_fast.training.train import loss_trajectory

    cfg = Config(**{**RECIPES["airbench94_muon"], "batch_size": 500}, precision="fp32",
                 kernels="torch", threads=1, data_dir=str(cifar_dir()), download=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        losses = loss_trajectory(cfg, len(LOSSES))
    finally:
        torch.set_num_threads(threads)
    assert [x.hex() for x in losses] == LOSSES, [x.hex() for x in losses]
