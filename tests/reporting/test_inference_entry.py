"""DAWNBench's inference entry (dawnbench_fast.runner.runs.inference and the file
bench.write_submission writes): it times the procedure that produced the
accuracy it states, and never states an accuracy below the target without
saying that it is not a valid entry."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from support.fake_task import FakeConfig

from dawnbench_fast.reporting import bench
from dawnbench_fast.runner import runs
from dawnbench_fast.training import train
from dawnbench_fast.training.train import Phases


def _run(accuracy: float, *, one_view: bool = False, latency_images: int = 3):
    cfg = FakeConfig(epochs=2, eval_every=0, accuracies=(accuracy,), target=0.94)
    task = cfg.build_task(torch.device("cpu"))
    phases = Phases(task.device, timer=cfg.timer)
    result = train.train(task, phases, progress=False)
    args = argparse.Namespace(latency_images=latency_images, latency_one_view=one_view)
    tta_seen: list[bool] = []
    original = task.predictor

    def predictor(tta: bool):
        tta_seen.append(tta)
        return original(tta)

    task.predictor = predictor
    return result, runs.inference(task, result, args, phases, cfg.target), tta_seen, phases


def _written(tmp_path, entry: runs.Inference, target: float = 0.94) -> dict:
    base = bench.train_json(author="a", email="", model="m", hardware="h", cost_per_hour=1.0,
                            log_filename="x.tsv", misc={"seed": 0})
    bench.write_submission(tmp_path, "stem", base, [], latency_ms=entry.latency_ms,
                           inference_top1=entry.top1, cost_per_hour=1.0,
                           inference_misc=entry.misc(target))
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["stem.json", "stem.tsv", "stem_inference.json"]  # one inference file, no other
    return json.loads((tmp_path / "stem_inference.json").read_text())


def test_the_latency_is_the_procedure_that_reached_the_stated_accuracy(tmp_path):
    result, entry, tta_seen, phases = _run(0.95)
    assert result.final.tta and entry.tta and tta_seen == [True]  # timed with the final TTA
    assert entry.top1 == result.final.top1 and entry.valid
    inf = _written(tmp_path, entry)
    assert inf["top1Accuracy"] == 95.0 and inf["latency"] == entry.latency_ms
    assert inf["misc"]["valid"] is True and inf["misc"]["latency_tta"] is True
    assert "invalid_reason" not in inf["misc"] and "one_view" not in inf["misc"]
    assert "inference_eval" not in phases.seconds  # no re-evaluation needed


def test_below_the_target_the_entry_says_it_is_not_valid(tmp_path):
    _, entry, _, _ = _run(0.9393)
    assert not entry.valid
    inf = _written(tmp_path, entry)
    assert inf["top1Accuracy"] == 93.93
    assert inf["misc"]["valid"] is False
    assert "below the 94.00% target" in inf["misc"]["invalid_reason"]


@pytest.mark.parametrize("accuracy", [0.95, 0.5])
def test_the_one_view_latency_goes_into_misc_labelled(tmp_path, accuracy):
    _, entry, tta_seen, phases = _run(accuracy, one_view=True)
    assert tta_seen == [True, False]
    assert entry.tta and entry.one_view["note"].startswith("one view, no TTA")
    inf = _written(tmp_path, entry)
    assert inf["misc"]["one_view"]["latency_ms"] == entry.one_view["latency_ms"]
    assert inf["top1Accuracy"] == round(100 * accuracy, 2)  # the entry stays the TTA procedure's
    assert "inference_eval" in phases.seconds


def test_no_latency_no_inference_file(tmp_path):
    _, entry, tta_seen, _ = _run(0.95, latency_images=0)
    assert entry.latency_ms is None and tta_seen == []
    base = bench.train_json(author="a", email="", model="m", hardware="h", cost_per_hour=None,
                            log_filename="x.tsv", misc={})
    bench.write_submission(tmp_path, "stem", base, [], latency_ms=None, inference_top1=entry.top1,
                           cost_per_hour=None, inference_misc=entry.misc(0.94))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stem.json", "stem.tsv"]


@pytest.mark.parametrize(("accuracy", "agrees"), [(0.6, True), (0.95, False)])
def test_the_latency_loops_own_accuracy_is_scored_over_the_whole_test_set(tmp_path, accuracy, agrees):
    """The fake predictor's one-image predictions are 60% right over its 5
    test images (support/fake_task.py): stated beside the batched accuracy,
    and said to differ when the batched evaluation gave another figure."""
    _, entry, _, _ = _run(accuracy, latency_images=5)
    record = entry.loop_record()
    assert record == {"latency_top1": 0.6, "latency_top5": None, "latency_test_images": 5,
                      "latency_matches_batched": agrees}
    inf = _written(tmp_path, entry)
    assert inf["top1Accuracy"] == round(100 * accuracy, 2)  # the entry states the batched figure
    assert inf["misc"]["latency_top1"] == 0.6 and inf["misc"]["latency_matches_batched"] is agrees
    note = inf["misc"]["latency_note"]
    assert "top-1 60.00% over all 5 test images" in note
    assert (", equal to the batched evaluation's" in note) is agrees
    assert ("NOT equal to the batched evaluation's top-1 95.00%" in note) is not agrees
    summary = {"seed": 0, "final_top1": accuracy, "tta_seconds": None, "latency_ms": entry.latency_ms,
               "latency_images": entry.images, "inference_top1": entry.top1, "inference_tta": entry.tta,
               "inference_valid": entry.valid, **record}
    assert note in "\n".join(bench._outcome_lines([summary], None))  # the console and report.txt


def test_fewer_latency_images_are_labelled_as_over_those_images():
    _, entry, _, _ = _run(0.6, latency_images=2)
    assert entry.loop_record()["latency_matches_batched"] is None  # no comparison over 2 of 5
    assert entry.loop_record()["latency_top1"] == 0.5
    assert "top-1 50.00% over its 2 images only (of 5 test images" in entry.misc(0.94)["latency_note"]


def _summary(seed: int, latency_ms: float | None, top1: float) -> dict:
    return {"seed": seed, "final_top1": top1, "tta_seconds": None, "latency_ms": latency_ms,
            "inference_top1": top1, "inference_tta": True, "inference_valid": top1 >= 0.94}


def test_the_latency_of_several_seeds_is_labelled_the_mean_never_one_seeds_accuracy():
    """The mean latency over seeds was once printed beside the last seed's
    accuracy ("1.12 ms (seed 2's model)"). Over several seeds the line says it
    is the mean of their latencies, then each seed's latency at its own accuracy."""
    runs_ = [_summary(0, 1.0, 0.9401), _summary(1, 2.0, 0.9399), _summary(2, 3.0, 0.9408)]
    lines = bench._outcome_lines(runs_, None)
    head = next(line for line in lines if line.startswith("one-image latency"))
    assert head.startswith("one-image latency: 2.000 ms, the mean of 3 seeds' latencies")
    assert "94.08%" not in head  # no single seed's accuracy beside the mean
    per_seed = [line.strip() for line in lines if line.startswith("  seed ")]
    assert per_seed == ["seed 0: 1.000 ms, at top-1 94.01% (with TTA)",
                        "seed 1: 2.000 ms, at top-1 93.99% (with TTA, below the target: not a valid entry)",
                        "seed 2: 3.000 ms, at top-1 94.08% (with TTA)"]


def test_one_timed_run_states_its_own_accuracy_and_names_its_seed_among_several():
    one = bench._outcome_lines([_summary(0, 1.5, 0.95)], None)
    assert "one-image latency: 1.500 ms, at top-1 95.00% (with TTA)" in one
    among = bench._outcome_lines([_summary(0, None, 0.95), _summary(1, 1.5, 0.96)], None)
    assert ("one-image latency: 1.500 ms (seed 1's model, the only one timed), at top-1 96.00% (with TTA)"
            in among)
