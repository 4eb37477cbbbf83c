"""The projection of ImageNet on N GPUs: the ring all-reduce model
and DDP's buckets against hand computations, the composition against a hand
computation, the inputs' JSON and its one-line errors, the ``project`` and
``measure`` commands, and the step's measurement as a CPU dry run (the GPU
suite runs the same function on CUDA, compiled)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from dawnbench_fast import imagenet
from dawnbench_fast.execution import gpu_defaults
from dawnbench_fast.imagenet import allreduce, projection
from dawnbench_fast.imagenet.recipe import apply_overrides
from dawnbench_fast.imagenet.step_rate import measure_sides, measure_step, recipe_sides
from dawnbench_fast.imagenet.task import Config, net_of

MIB = 1024 * 1024


@pytest.fixture
def one_thread():
    """The measurements on one thread: two OpenMP threads on a busy machine
    (another process on a core) made these steps many times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_the_ring_against_a_hand_computation():
    # 8 ranks, 100 MB, 50 GB/s, 5 us per hop: 14 hops x 5 us + 14/8 x 1e8 / 5e10 s
    assert allreduce.ring_seconds(1e8, 8, 50e9, 5e-6) == pytest.approx(14 * 5e-6 + 1.75 * 2e-3)
    assert allreduce.ring_seconds(1e8, 2, 1e9) == pytest.approx(0.1)  # 2 (2-1)/2 = 1 x S / B
    assert allreduce.ring_seconds(1e8, 1, 1e9, 1.0) == 0.0  # one rank sends nothing


def test_buckets_close_after_the_parameter_that_reaches_the_cap():
    sizes = [MIB // 2, MIB * 6 // 10, 10 * MIB, 20 * MIB, 3 * MIB]
    # first bucket: 0.5 + 0.6 MiB >= 1 MiB; then 10 + 20 >= 25 MiB; the rest
    assert allreduce.bucket_bytes(sizes) == [MIB // 2 + MIB * 6 // 10, 30 * MIB, 3 * MIB]


def test_the_ring_fitted_to_exact_points():
    # points made by the formula itself (8 ranks, 20 GB/s, 7 us a hop) give its figures back
    points = [(s, allreduce.ring_seconds(s, 8, 20e9, 7e-6)) for s in (4096, MIB, 25 * MIB)]
    bw, latency = allreduce.fit_ring(points, 8)
    assert bw == pytest.approx(20e9) and latency == pytest.approx(7e-6)


def test_a_total_is_cut_at_ddps_caps():
    assert allreduce.even_buckets(60 * MIB) == [MIB, 25 * MIB, 25 * MIB, 9 * MIB]
    assert allreduce.even_buckets(MIB // 2) == [MIB // 2]


def test_resnet50s_gradients_in_ddps_buckets():
    grads = allreduce.gradient_bytes(net_of(Config(), 1000))
    assert sum(grads) == 25_557_032 * 4  # fp32 gradients of torchvision's parameter count
    buckets = allreduce.bucket_bytes(grads)
    assert sum(buckets) == sum(grads) and buckets[0] >= MIB and all(b >= 25 * MIB for b in buckets[1:-1])
    # one ring of all of it on 8 GPUs at NVLink's 450 GB/s: 2 x 7/8 x 102.2 MB / 450 GB/s = 0.40 ms
    assert allreduce.ring_seconds(sum(grads), 8, 450e9) == pytest.approx(0.3976e-3, rel=1e-3)


def test_the_overlap_against_a_hand_computation():
    # compute 3 s, backward the last 2 s (share 2/3) producing 8 bytes evenly; two buckets of
    # 4 bytes, 2 ranks at 8 B/s: each ring 2 x 1/2 x 4 / 8 = 0.5 s. Bucket 1 ready at 2 s, done
    # at 2.5; bucket 2 ready at 3 (the backward's end), done at 3.5: 0.5 s exposed.
    ov = allreduce.overlap([4, 4], 3.0, 2, 8.0)
    assert ov.comm_s == pytest.approx(1.0) and ov.exposed_s == pytest.approx(0.5)
    # a slow network: each ring 2 s; bucket 1 done at 4, bucket 2 starts then, done at 6: 3 s exposed
    assert allreduce.overlap([4, 4], 3.0, 2, 2.0).exposed_s == pytest.approx(3.0)
    assert allreduce.overlap([4, 4], 3.0, 1, 2.0).exposed_s == 0.0


def _inputs(tmp_path, **extra) -> str:
    data = {"schema_version": 1,
            "step": {"batch_per_gpu": 100, "images_per_s": {"160": 1000.0, "192": 800.0},
                     "eval": {"side": 256, "images_per_s": 2000.0}, "source": "hand-made"},
            "gradient": {"buckets": [4_000_000]}, **extra}
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps(data))
    return str(path)


def _setup(**kw) -> projection.Setup:
    recipe = apply_overrides(Config(epochs=kw.pop("epochs", 2), warmup_epochs=0),
                             kw.pop("sets", ["min_res=160", "max_res=160"]))
    return projection.Setup(recipe=recipe, epochs=recipe.epochs, train_images=10_000, val_images=1000, **kw)


def test_the_composition_against_a_hand_computation(tmp_path):
    inputs = projection.read_inputs(_inputs(tmp_path))
    # one GPU: 100 steps of 100 images per epoch at 1000 images/s = 10 s an epoch; 2 epochs;
    # the evaluation 1000 images at 2000/s: 20.5 s, at $3/h
    p = projection.project(inputs, _setup(gpus=1))
    assert [r.side for r in p.sides] == [160] and p.sides[0].steps == 200
    assert p.total_s == pytest.approx(20.5) and p.usd == pytest.approx(20.5 / 3600 * 3.0)
    assert p.bound == "gpu" and p.notes["network"] == "one GPU: no all-reduce"
    # two GPUs at 1 GB/s: global batch 200, 50 steps an epoch; compute 0.1 s, the bucket's ring
    # 2 x 1/2 x 4 MB / 1 GB/s = 4 ms, ready at the backward's end: all of it exposed
    two = projection.project(inputs, _setup(gpus=2, bus_bytes_per_s=1e9, latency_s=0.0))
    assert two.sides[0].allreduce_exposed_s == pytest.approx(0.004)
    assert two.total_s == pytest.approx(100 * 0.104 + 500 / 2000)


def test_the_loader_bounds_when_its_cores_fall_short(tmp_path):
    inputs = projection.read_inputs(_inputs(tmp_path, loader={"forms": {"packed": {"160": 50.0}}}))
    p = projection.project(inputs, _setup(gpus=1, cores_per_gpu=4))  # 200 images/s: 0.5 s a step
    assert p.sides[0].loader_s == pytest.approx(0.5) and p.sides[0].step_s == pytest.approx(0.5)
    assert p.bound == "loader cores" and p.total_s == pytest.approx(200 * 0.5 + 0.5)
    shared = projection.project(inputs, _setup(gpus=1, cores_per_gpu=4, shared_cores=True))
    assert shared.sides[0].step_s == pytest.approx(0.6)  # a CPU: the loader's and the step's times add


def test_a_slow_network_bounds_and_the_sides_follow_the_recipe(tmp_path):
    inputs = projection.read_inputs(_inputs(tmp_path, gradient={"bytes": 2_000_000_000}))
    # 16 GPUs over 100 Gb/s: one 2 GB ring is 30/16 x 2e9 / 12.5e9 = 0.3 s, after a 0.1 s compute
    p = projection.project(inputs, _setup(gpus=16, network="100g", epochs=40, sets=[]))
    assert p.bound == "network" and "100g" in p.notes["network"]
    # the default recipe: 160 px for epochs 0-31, the ramp rounded to 192 from epoch 32
    assert [(r.side, r.epochs) for r in p.sides] == [(160, 32), (192, 8)]
    assert recipe_sides(Config()) == [160, 192]


def test_a_gpu_step_is_the_larger_of_its_compute_and_its_loader(tmp_path):
    # on a GPU the loader's threads run beside the step. Two GPUs at 1 GB/s: compute 0.1 s plus the
    # exposed ring's 4 ms (the composition test above) against the loader's 100 images on 4 cores
    def two_gpus(per_core: float) -> projection.Projection:
        loader = {"forms": {"packed": {"160": per_core, "256": 500.0}}}
        return projection.project(projection.read_inputs(_inputs(tmp_path, loader=loader)),
                                   _setup(gpus=2, cores_per_gpu=4, bus_bytes_per_s=1e9, latency_s=0.0))

    p = two_gpus(500.0)  # 2000 images/s: 0.05 s, hidden
    row = p.sides[0]
    assert row.loader_s == pytest.approx(0.05) and row.step_s == pytest.approx(0.104) and p.bound == "gpu"
    assert p.total_s == pytest.approx(100 * 0.104 + 500 / 2000)  # the evaluation reads no loader here
    slow = two_gpus(200.0)  # 800 images/s: 0.125 s, longer than the GPU's 0.104
    assert slow.sides[0].step_s == pytest.approx(0.125) and slow.bound == "loader cores"


@pytest.mark.parametrize(("tta", "rate"), [(True, 800 * 3 / 2 * (192 / 256) ** 2),
                                           (False, 800 * 3 * (192 / 256) ** 2)])
def test_an_evaluation_not_measured_is_assumed_from_the_largest_side(tmp_path, tta, rate):
    # a forward is a third of a training step, the mirror doubles it, the pixels scale it: at 192 px
    # (800 images/s) to the recipe's 256-px evaluation
    inputs = projection.read_inputs(_inputs(tmp_path))
    del inputs["step"]["eval"]
    p = projection.project(inputs, _setup(gpus=1, sets=["min_res=160", "max_res=160", f"tta={tta}"]))
    assert p.eval_s == pytest.approx(1000 / rate) and p.total_s == pytest.approx(20 + 1000 / rate)
    assert p.eval_source.startswith("assumed: 3x the 192-px training rate")


def test_an_evaluation_on_shared_cores_pays_for_its_decoding(tmp_path):
    # a CPU device: the 1000 val images also take the loader's 4 cores at 25 images/s each, 10 s
    loader = {"forms": {"packed": {"160": 50.0, "256": 25.0}}}
    p = projection.project(projection.read_inputs(_inputs(tmp_path, loader=loader)),
                           _setup(gpus=1, cores_per_gpu=4, shared_cores=True))
    assert p.eval_s == pytest.approx(1000 / 2000 + 10.0)
    assert p.total_s == pytest.approx(200 * (0.1 + 0.5) + 10.5)


@pytest.mark.parametrize(("data", "says"), [
    ("{", "not JSON"),
    ("[]", "not a JSON object"),
    ('{"step": {"batch_per_gpu": 8}}', "no step.images_per_s"),
    ('{"step": {"batch_per_gpu": 8, "images_per_s": {"160": -1}}}', "step.images_per_s['160'] = -1"),
    ('{"step": {"batch_per_gpu": "8", "images_per_s": {"160": 1}}}', "step.batch_per_gpu is '8'"),
    ('{"schema_version": 2, "step": {}}', "schema_version 2"),
])
def test_a_bad_inputs_file_is_one_line_naming_it(tmp_path, capsys, data, says):
    path = tmp_path / "suite.json"
    path.write_text(data)
    assert imagenet.main(["project", "--from", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(path) in err and says in err, err


def test_the_project_command_and_its_errors(tmp_path, capsys):
    path = _inputs(tmp_path)
    out = tmp_path / "p.json"
    assert imagenet.main(["project", "--from", path, "--gpus", "1", "--epochs", "2",
                          "--train-images", "10000", "--val-images", "1000", "--set", "max_res=160",
                          "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "time to accuracy: 0.3 min (20 s)" in printed and "bound: gpu" in printed
    assert json.loads(out.read_text())["total_s"] == pytest.approx(20.5)
    # the default recipe reaches 192 px: a rate missing there is named
    del_192 = tmp_path / "no192.json"
    del_192.write_text(json.dumps({"step": {"batch_per_gpu": 100, "images_per_s": {"160": 1000}}}))
    assert imagenet.main(["project", "--from", str(del_192)]) == 2
    assert "no rate at 192 px" in capsys.readouterr().err
    assert imagenet.main(["project", "--from", str(tmp_path / "none.json")]) == 2
    assert "none.json: cannot read it" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # argparse's own one-line error
        imagenet.main(["project", "--from", path, "--gpus", "0"])
    assert stop.value.code == 2 and "--gpus: 0: must be > 0" in capsys.readouterr().err


def test_the_step_measured_on_the_cpu_dry_run(one_thread):
    cfg = apply_overrides(Config(arch="resnet18", width=4, min_res=32, max_res=32, val_res=32, epochs=2,
                                 warmup_epochs=1, precision="fp32"), [])
    step = measure_sides(cfg, 4, torch.device("cpu"), steps=2, warmup=1, classes=10)
    (row,) = step["sides"]
    assert row["side"] == 32 and row["batch_per_device"] == 4 and row["images_per_s"] > 0
    assert row["compiled"] is False and row["kernel_s"] is None and row["peak_memory_bytes"] is None
    assert step["images_per_s"] == {"32": row["images_per_s"]} and step["eval"]["images_per_s"] > 0


def test_the_compiled_step_dry_run(monkeypatch, one_thread):
    """The GPU's path (compile on), captured by Dynamo and run by its eager
    backend: the same code the suite compiles with inductor on CUDA."""
    monkeypatch.setattr(gpu_defaults, "COMPILE_BACKEND", "eager")
    cfg = Config(arch="resnet18", width=4, precision="fp32", compile="on")
    row = measure_step(cfg, 32, 4, torch.device("cpu"), steps=1, warmup=1, classes=10)
    assert row.compiled is True and row.images_per_s > 0


def test_measure_writes_inputs_that_project_reads(tmp_path, capsys, one_thread, monkeypatch):
    # measure sets the process up as a trainer does; here the allocator is left as the test process has it
    monkeypatch.setenv("DAWNBENCH_MALLOC", "system")
    out = tmp_path / "measured.json"
    assert imagenet.main(["measure", "--out", str(out), "--device", "cpu", "--arch", "resnet18",
                          "--width", "4", "--batch", "4", "--steps", "2", "--precision", "fp32",
                          "--classes", "10", "--threads", "1", "--eval-batch", "0",
                          "--set", "min_res=32", "--set", "max_res=32", "--set", "val_res=32"]) == 0
    measured = json.loads(out.read_text())
    assert measured["step"]["batch_per_gpu"] == 4 and set(measured["step"]["images_per_s"]) == {"32"}
    assert imagenet.main(["project", "--from", str(out), "--gpus", "2", "--epochs", "1",
                          "--set", "min_res=32", "--set", "max_res=32", "--set", "val_res=32"]) == 0
    assert "measured: dawnbench_fast.imagenet.step_rate" in capsys.readouterr().out


ALLREDUCE = ["measure", "--allreduce", "--device", "cpu", "--arch", "resnet18", "--width", "4",
             "--batch", "4", "--steps", "1", "--warmup", "1", "--precision", "fp32", "--classes", "10",
             "--threads", "1", "--eval-batch", "0", "--set", "min_res=32", "--set", "max_res=32",
             "--set", "val_res=32"]


def test_measure_allreduce_alone_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DAWNBENCH_MALLOC", "system")  # the test process's allocator left as it is
    assert imagenet.main([*ALLREDUCE, "--out", str(tmp_path / "alone.json")]) == 2
    assert "--allreduce: run under torchrun with 2 or more processes" in capsys.readouterr().err


@pytest.mark.e2e
def test_measure_allreduce_under_torchrun(tmp_path):
    """Two gloo processes time the all-reduce and fit the ring; the file's
    network is what ``project`` reads."""
    out = tmp_path / "net.json"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                        "-m", "dawnbench_fast.imagenet", *ALLREDUCE, "--out", str(out)], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    net = json.loads(out.read_text())["network"]
    assert net["ranks"] == 2 and net["backend"] == "gloo" and net["bus_gbytes_per_s"] > 0
    assert [p["bytes"] for p in net["points"]] == [4096, MIB, 25 * MIB]
    inputs = projection.read_inputs(out)
    assert projection._network(inputs, _setup(gpus=2))[0] == pytest.approx(net["bus_gbytes_per_s"] * 1e9)
