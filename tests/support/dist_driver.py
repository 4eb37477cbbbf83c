"""Run a trainer's command line (one process, or one rank of a torchrun job)
and record the global loss of each of its timed run's steps, for
tests/test_distributed_*.py:

    python tests/support/dist_driver.py {cifar,imagenet} OUT_JSON -- TRAINER ARGS...
    python -m torch.distributed.run --nproc-per-node 2 tests/support/dist_driver.py ...

OUT_JSON (rank 0 writes it) holds ``losses``: each step's loss per example
over the global batch (the ranks' sums all-reduced), ``weights_equal``:
whether after every step every rank held the same weights, and for the CIFAR
trainer ``ghost_first``: step 1's loss computed in one process as N ranks
with per-rank BN compute it, the global batch cut into N equal slices each
normalised by its own statistics (N from ``DRIVER_GHOST_SLICES``).
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dawnbench_fast.cifar import step as cifar_step  # noqa: E402
from dawnbench_fast.execution import distributed  # noqa: E402
from dawnbench_fast.runner.runs import WARMUP_SEED  # noqa: E402


def rank_env() -> dict[str, str]:
    """The environment of a driver's processes: this checkout importable, and
    Python's fault handler on, so that a rank killed by a signal (a SIGABRT
    at exit, seen once in a two-process run and not reproduced in 80 more)
    prints every thread's Python stack into the failing test's output."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "PYTHONFAULTHANDLER": "1"}


FAULT = "Fatal Python error"  # how the fault handler's report of a fatal signal starts


def failure_output(stdout: str, stderr: str, tail: int = 3000) -> str:
    """What a failed run's assertion shows: the ends of stdout and stderr and,
    whole, each report of the fault handler (from its first line to the list
    of extension modules that ends it, left out). A rank's abort at exit
    prints every thread's stack there, and torchrun's own report and the
    other rank's output after it pushed all but the last thread out of a
    plain tail (2026-11-29: only "<no Python frame>" was left)."""
    reports = []
    at = stderr.find(FAULT)
    while at >= 0:
        end = stderr.find("Extension modules:", at)
        end = end if end >= 0 else len(stderr)
        reports.append(stderr[at:end])
        at = stderr.find(FAULT, end)
    faults = "".join(f"\n--- the fault handler ---\n{r}" for r in reports)
    return f"{stdout[-2000:]}{stderr[-tail:]}{faults}"


def run(trainer: str, out: Path, argv: list[str], processes: int = 1, timeout: int = 300) -> dict:
    """Run this driver (under torchrun with ``processes`` > 1) and return its
    record; the trainer's stdout and stderr are in ``record["output"]``."""
    launch = [sys.executable]
    if processes > 1:
        launch += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
    r = subprocess.run([*launch, __file__, trainer, str(out), "--", *argv], capture_output=True, text=True,
                       timeout=timeout, env=rank_env())
    assert r.returncode == 0, failure_output(r.stdout, r.stderr)
    return {**json.loads(out.read_text()), "output": r.stdout + r.stderr}


def ghost_loss(task, batch, slices: int) -> float:
    """CIFAR: step 1's loss as ``slices`` ranks with per-rank BN compute it."""

    key, = batch
    idx, x = key.idx, cifar_step.make_batch(task.state, key, key.side)
    model, cfg = copy.deepcopy(task.model), task.cfg  # its BN running statistics stay untouched
    y = task.data.train_labels[idx]
    total = 0.0
    for part in range(slices):
        s = slice(part * len(idx) // slices, (part + 1) * len(idx) // slices)
        total += cifar_step.forward_loss(model, x[s], y[s], task.whiten_bias_grad(), cfg.precision,
                                    cfg.label_smoothing).item()
    return total / len(idx)


def main() -> int:
    name, out, rest = sys.argv[1], Path(sys.argv[2]), sys.argv[sys.argv.index("--") + 1:]
    module = importlib.import_module(f"dawnbench_fast.{name}")
    task_class = module.CifarTask if name == "cifar" else module.ImageNetTask
    step = task_class.train_step
    record: dict = {"losses": []}
    slices = int(os.environ.get("DRIVER_GHOST_SLICES", "2"))

    def recording(self, *batch):
        timed = self.cfg.seed != WARMUP_SEED  # the warm-up's throwaway task is not recorded
        if timed and name == "cifar" and not record["losses"] and not self.world.distributed:
            record["ghost_first"] = ghost_loss(self, batch, slices)
        loss = step(self, *batch)
        if timed:
            w = distributed.world()
            record["losses"].append(float(w.sum_float(loss.total)) / w.sum_counts([loss.examples])[0])
            # the ranks' weights after the step: equal on every rank (summed: size x one rank's)
            mine = sum(p.detach().double().sum() for p in self.model.parameters())
            record["weights_equal"] = record.get("weights_equal", True) and \
                float(w.sum_float(mine)) == w.size * float(mine)
        return loss

    task_class.train_step = recording
    rank = int(os.environ.get("RANK", "0"))
    code = module.main(rest)
    if rank == 0:
        out.write_text(json.dumps(record))
    return code


if __name__ == "__main__":
    sys.exit(main())
