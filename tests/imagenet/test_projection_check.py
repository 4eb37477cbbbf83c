"""The projection's check in its parts, without timing. The check itself,
the composition predicting a short real run here within 20% (one process)
or 35% (two gloo processes), is a measurement whose verdict moves with the
machine's load: benchmarks/projection_check.py (docs/IMAGENET.md, "Checking
the composition on this machine").

Here: ``measure`` with the check's own flags writes what the check reads;
the ranks' measurements combine into one inputs' file (each rate the mean of
the times) that the projection reads back and composes into the run's step
count; and the verdict on a set of tries (passed, the machine's noise, a
bias of the composition).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from dawnbench_fast import imagenet
from dawnbench_fast.data.imagenet.synthetic import make_image_folder

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import projection_check as check  # noqa: E402


def test_the_ranks_measurements_combine_into_inputs_the_projection_composes(tmp_path, monkeypatch):
    folder = make_image_folder(tmp_path / "data", classes=check.CLASSES, train_per_class=1, val_per_class=1,
                               size=72)
    monkeypatch.setenv("DAWNBENCH_MALLOC", "system")  # the test process's allocator left as it is
    out = tmp_path / "rank0.json"
    # the check's flags for one of two ranks, at one step (later flags win)
    assert imagenet.main(["measure", *check.measure_args(folder, 2), "--steps", "1", "--warmup", "1",
                          "--loader-seconds", "0.05", "--out", str(out)]) == 0
    first = json.loads(out.read_text())
    side = str(check.SIDE)
    second = copy.deepcopy(first)  # another rank, or the same one after the run: other rates
    second["step"]["images_per_s"][side] = 3 * first["step"]["images_per_s"][side]
    second["step"]["eval"]["images_per_s"] = 2 * first["step"]["eval"]["images_per_s"]
    second["loader"]["forms"]["folder"][side] = 3 * first["loader"]["forms"]["folder"][side]
    network = {"bus_gbytes_per_s": 1.2, "latency_us": 300.0, "ranks": 2, "backend": "gloo"}

    inputs = check.inputs_json([first, second], network, tmp_path / "inputs.json")
    # the harmonic mean: 2 / (1/r + 1/3r) = 1.5 r
    rate, evaluation = first["step"]["images_per_s"][side], first["step"]["eval"]["images_per_s"]
    assert inputs["step"]["rates"] == {check.SIDE: pytest.approx(1.5 * rate)}
    assert inputs["step"]["eval"]["images_per_s"] == pytest.approx(4 / 3 * evaluation)
    per_core = first["loader"]["forms"]["folder"][side]
    assert inputs["loader_rates"] == {"folder": {check.SIDE: pytest.approx(1.5 * per_core)}}
    assert inputs["network"] == network and inputs["step"]["batch_per_gpu"] == check.BATCH // 2

    # two ranks of 24: the run's 20 steps of 48, and an all-reduce at the inputs' network
    p = check.predicted(inputs, 2)
    assert [(r.side, r.steps) for r in p.sides] == [(check.SIDE, check.EPOCHS * check.TRAIN // check.BATCH)]
    assert p.total_s > 0 and p.sides[0].allreduce_exposed_s > 0
    # one process: no network in the inputs, and none modelled
    alone = check.inputs_json([first], {}, tmp_path / "alone.json")
    assert "network" not in alone and check.predicted(alone, 1).notes["network"] == "one GPU: no all-reduce"


@pytest.mark.parametrize(("errors", "verdict"), [
    ([0.05], check.PASSED),
    ([-0.4, 0.19], check.PASSED),  # a later try within 20%
    ([-0.4, 0.3, 0.25], check.NOISE),  # both ways: the load moved
    ([-0.3, -0.5, -0.25], check.BIASED),  # all one way: a large part left out or counted twice
])
def test_the_verdict_on_the_tries(errors, verdict):
    assert check.verdict(errors, check.TOLERANCES[1]) == verdict


def test_two_processes_are_held_to_their_measured_band():
    assert check.verdict([-0.3], check.TOLERANCES[2]) == check.PASSED  # the -22 to -30% bias on 2 cores
    assert check.verdict([-0.5, -0.6], check.TOLERANCES[2]) == check.BIASED
