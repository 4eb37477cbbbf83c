"""The projection's check on this machine: the composition that projects
ImageNet on N GPUs (dawnbench_fast.imagenet.projection) predicts a short real
run made here, from parts measured here just before and just after it; the
prediction must come within :data:`TOLERANCES` of the run's clock (20% in one
process, 35% in two: the model's known miss on a CPU, at TOLERANCES).

    python benchmarks/projection_check.py                 # one process, then two gloo processes
    python benchmarks/projection_check.py --ranks 1 --attempts 5

A measurement, not a test (tests/test_benchmarks.py lists it among the
scripts): its verdict depends on the cores the machine's other users take.
tests/imagenet/test_projection_check.py tests its parts (how the ranks'
measurements combine into the inputs the projection reads) without timing.

The run: the ImageNet trainer on a generated 10-class folder (480 training
images at 72 px, trained at 64 px), a ResNet-18 of width 16, fp32, batch 48,
2 epochs (20 steps) and the final evaluation with the mirror: one process,
and two gloo processes under torchrun. The parts, measured by `measure` (the
command a user runs) in as many processes as the run has, at once, so that
they share the cores as the run's processes will, just before and just
after the run: the step at the batch per process (synthetic batches, one
thread), the evaluation's forward, the loader per core on the same folder;
the all-reduce by the ring model at gloo's figures, as `measure --allreduce`
fits them in two processes here. On a CPU the loader's threads and the step
share the cores, so the composition adds their times (``shared_cores``),
where on a GPU it takes the larger.

What it cannot see: the cores the machine's other users take, which change
from second to second (on a 2-core machine, load averages of 4-7 during
these runs; the same run's step took 87 to 260 ms). Hence up to
``--attempts`` tries: a try within its tolerance passes (exit 0); when none
is, errors of both signs are the machine's noise (exit 3, the errors said),
errors all of one sign a bias of the composition (exit 1): a large part
left out or counted twice (the step, the loader) moves every try the same
way. Parts smaller than the band (the all-reduce, 1-4% of this run; the
evaluation, under 10%) and the GPU formula (the larger of step and loader,
which shared cores never take) are beyond a timed check: tests against hand
computations hold them (tests/imagenet/test_projection.py). Measured errors:
docs/IMAGENET.md, "Checking the composition".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from dawnbench_fast.imagenet import projection
from dawnbench_fast.imagenet.recipe import apply_overrides
from dawnbench_fast.imagenet.task import Config

# Two gloo processes on a 2-core CPU: the run's step is slower than the composition says by
# more than its noise. On an idle machine (load 1.4-1.6, 2026-11-27, CI's fresh clone) every try
# missed by -22 to -30%: DDP's bucket copies and hooks and gloo's threads take turns with the
# steps on the same two cores, where the model, made for GPUs, overlaps the all-reduce with the
# backward and counts no DDP overhead. Outside 20% there, so the check holds them to 35%: the
# step or the loader left out or counted twice (50% or more) still fails it.
TOLERANCES = {1: 0.20, 2: 0.35}
ATTEMPTS = 3
# Each process: one thread for the step and one for the loader. More threads per step lose
# to the machine's other users: two OpenMP threads on a core that another process holds made
# this step 5-25x slower (measured), where one thread stays within a few percent.
THREADS = 1
BATCH, EPOCHS, SIDE, CLASSES, TRAIN, VAL = 48, 2, 64, 10, 480, 100
WIDTH = 16  # the step several times the loader's work a batch: whether they overlap matters less
RECIPE = ["arch=resnet18", f"width={WIDTH}", f"min_res={SIDE}", f"max_res={SIDE}", f"val_res={SIDE}",
          "warmup_epochs=1", "lr_per_256=0.25"]
PASSED, BIASED, NOISE = 0, 1, 3  # exit statuses


def make_folder(where: Path) -> Path:
    from dawnbench_fast.data.imagenet.synthetic import make_image_folder

    return make_image_folder(where, classes=CLASSES, train_per_class=TRAIN // CLASSES,
                             val_per_class=VAL // CLASSES, size=72)


def _checked(r: subprocess.CompletedProcess | int, what: str, err: str = "") -> None:
    code = r if isinstance(r, int) else r.returncode
    if code != 0:
        said = err or getattr(r, "stderr", "")
        raise SystemExit(f"projection_check: {what} exited {code}: {said[-3000:]}")


def gloo_network(work: Path) -> dict:
    """The all-reduce between two gloo processes here, as ``measure
    --allreduce`` fits it (the net of the check sends 2.8 MB a step)."""
    out = work / "net.json"
    args = ["measure", "--allreduce", "--device", "cpu", "--arch", "resnet18", "--width", "4", "--batch", "4",
            "--steps", "1", "--warmup", "1", "--precision", "fp32", "--threads", "1", "--eval-batch", "0",
            "--set", "min_res=32", "--set", "max_res=32", "--set", "val_res=32", "--out", str(out)]
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                        "-m", "dawnbench_fast.imagenet", *args], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    _checked(r, "measure --allreduce")
    return json.loads(out.read_text())["network"]


def recipe() -> Config:
    return apply_overrides(Config(epochs=EPOCHS, precision="fp32"), RECIPE)


def measure_args(folder: Path, ranks: int) -> list[str]:
    """``measure``'s flags for one of ``ranks`` processes: one rank's threads and batch."""
    args = ["--device", "cpu", "--arch", "resnet18", "--width", str(WIDTH), "--batch", str(BATCH // ranks),
            "--eval-batch", str(VAL // ranks), "--steps", "6", "--warmup", "6", "--precision", "fp32",
            "--classes", str(CLASSES), "--threads", str(THREADS), "--data-dir", str(folder),
            "--loader-seconds", "0.3"]
    for pair in RECIPE:
        args += ["--set", pair]
    return args


def measure(folder: Path, ranks: int, out: Path) -> list[dict]:
    """The parts, measured by ``measure`` (the command a user runs) in
    ``ranks`` processes at once, so that they share the cores as the run's
    processes will: their inputs' JSONs."""
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS)}
    procs = [subprocess.Popen([sys.executable, "-m", "dawnbench_fast.imagenet", "measure",
                               *measure_args(folder, ranks), "--out", str(out / f"rank{r}.json")],
                              env=env, stderr=subprocess.PIPE, text=True)
             for r in range(ranks)]
    for p in procs:
        _checked(p.wait(timeout=300), "measure", p.stderr.read())
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]


def inputs_json(measured: list[dict], network: dict, path: Path, side: int = SIDE) -> dict:
    """One inputs' JSON from several (the ranks', before and after the run):
    each rate the harmonic mean (the mean of the times), read back as the
    projection command reads it."""
    def rate(get) -> float:
        rates = [get(m) for m in measured]
        return len(rates) / sum(1 / r for r in rates)

    first, key = measured[0], str(side)
    evaluation = {**first["step"]["eval"], "images_per_s": rate(lambda m: m["step"]["eval"]["images_per_s"])}
    step = {**first["step"], "images_per_s": {key: rate(lambda m: m["step"]["images_per_s"][key])},
            "eval": evaluation}
    per_core = rate(lambda m: m["loader"]["forms"]["folder"][key])
    loader = {**first["loader"], "forms": {"folder": {key: per_core}}}
    net = {"network": network} if network else {}  # one process: no all-reduce to model
    path.write_text(json.dumps({**first, "step": step, "loader": loader, **net}))
    return projection.read_inputs(path)


def predicted(inputs: dict, ranks: int) -> projection.Projection:
    setup = projection.Setup(gpus=ranks, cores_per_gpu=THREADS, epochs=EPOCHS, epochs_source="the run's",
                             recipe=recipe(), train_images=TRAIN, val_images=VAL, shared_cores=True)
    return projection.project(inputs, setup)


def run_trainer(folder: Path, out: Path, ranks: int) -> dict:
    args = ["--data-dir", str(folder), "--out", str(out), "--epochs", str(EPOCHS), "--batch-size", str(BATCH),
            "--precision", "fp32", "--threads", str(THREADS), "--set", f"loader_threads={THREADS}",
            "--no-preflight", "--latency-images", "1", "--no-progress"]
    for pair in RECIPE:
        args += ["--set", pair]
    launch = [sys.executable] + (["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
                                 if ranks > 1 else [])
    r = subprocess.run([*launch, "-m", "dawnbench_fast.imagenet", *args], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "OMP_NUM_THREADS": str(THREADS)})
    _checked(r, "the trainer")
    return json.loads((out / "run.json").read_text())["result"]


def attempt(folder: Path, tmp: Path, ranks: int, network: dict) -> tuple[float, str]:
    """One prediction against one run: (relative error, what happened)."""
    tmp.mkdir()
    before = measure(folder, ranks, tmp)
    result = run_trainer(folder, tmp / "run", ranks)
    p = predicted(inputs_json([*before, *measure(folder, ranks, tmp)], network, tmp / "inputs.json"), ranks)
    if p.sides[0].steps != EPOCHS * TRAIN // BATCH:
        raise SystemExit(f"projection_check: the composition counts {p.sides[0].steps} steps, the run "
                         f"{EPOCHS * TRAIN // BATCH}")
    clock = result["end_clock_seconds"]
    error = p.total_s / clock - 1
    return error, (f"predicted {p.total_s:.2f} s, measured {clock:.2f} s, error {100 * error:+.1f}% (step "
                   f"{1e3 * p.sides[0].step_s:.1f} ms predicted, the run's "
                   f"{1e3 * result['phases_seconds']['train'] / p.sides[0].steps:.1f} ms; "
                   f"load {os.getloadavg()[0]:.1f})")


def verdict(errors: list[float], tolerance: float) -> int:
    """:data:`PASSED` when a try came within ``tolerance``; else :data:`NOISE`
    for errors of both signs, :data:`BIASED` for errors all of one sign."""
    if any(abs(e) < tolerance for e in errors):
        return PASSED
    return NOISE if min(errors) < 0 < max(errors) else BIASED


def check(folder: Path, work: Path, ranks: int, network: dict, attempts: int) -> int:
    """Up to ``attempts`` tries, each measuring the parts again; the verdict's exit status."""
    errors: list[float] = []
    for k in range(attempts):
        error, what = attempt(folder, work / f"ranks{ranks}-{k}", ranks, network)
        errors.append(error)
        print(f"ranks {ranks}, try {k + 1}: {what}", flush=True)
        if verdict(errors, TOLERANCES[ranks]) == PASSED:
            return PASSED
    said = {BIASED: "every try off by more than {:.0%}, all the same way: a bias of the composition",
            NOISE: "every try off by more than {:.0%}, both ways: the machine's load moved between the "
                   "parts and the runs"}
    code = verdict(errors, TOLERANCES[ranks])
    print(f"ranks {ranks}: " + said[code].format(TOLERANCES[ranks]), flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/projection_check.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, nargs="+", choices=sorted(TOLERANCES), default=sorted(TOLERANCES))
    p.add_argument("--attempts", type=int, default=ATTEMPTS)
    p.add_argument("--work", type=Path, help="where the runs go (default: a temporary folder, removed after)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="projection-check-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        folder = make_folder(work / "data")
        network = gloo_network(work) if max(args.ranks) > 1 else {}
        codes = {check(folder, work, ranks, network, args.attempts) for ranks in args.ranks}
    return BIASED if BIASED in codes else max(codes)


if __name__ == "__main__":
    sys.exit(main())
