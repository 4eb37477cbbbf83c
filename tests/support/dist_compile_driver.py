"""tests/support/dist_driver.py with the trainer's step compiled (``--compile``) by a
backend that counts the graphs it is handed and runs them through AOTAutograd
without code generation (``aot_eager``: the forward and backward graphs that
Inductor would generate code for, split by Dynamo's DDPOptimizer, run as
captured), for tests/execution/test_compile_ddp.py:

    python -m torch.distributed.run --nproc-per-node 2 \
        tests/support/dist_compile_driver.py imagenet OUT_JSON -- ARGS

OUT_JSON holds dist_driver's record plus ``graphs_warm_up`` (graphs compiled
before the timed run's model was built), ``graphs`` (all of them) and
``graph_breaks`` (Dynamo's graph-break count), as rank 0 counted them.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported by the tests
import dist_driver  # noqa: E402

from dawnbench_fast.execution import gpu_defaults  # noqa: E402
from dawnbench_fast.runner.runs import WARMUP_SEED  # noqa: E402


def run(trainer: str, out: Path, argv: list[str], processes: int = 2, timeout: int = 300) -> dict:
    """Run this driver under torchrun with ``processes`` ranks and return its record
    (the trainer's stdout and stderr in ``record["output"]``)."""
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
    r = subprocess.run([*launch, __file__, trainer, str(out), "--", *argv], capture_output=True, text=True,
                       timeout=timeout, env=dist_driver.rank_env())
    assert r.returncode == 0, dist_driver.failure_output(r.stdout, r.stderr)
    return {**json.loads(out.read_text()), "output": r.stdout + r.stderr}


def main() -> int:
    name, out = sys.argv[1], Path(sys.argv[2])
    graphs: list[int] = []
    aot_eager = torch._dynamo.lookup_backend("aot_eager")

    def counting(gm, example_inputs):
        graphs.append(len(gm.graph.nodes))
        return aot_eager(gm, example_inputs)

    gpu_defaults.COMPILE_BACKEND = counting
    trainer = importlib.import_module(f"dawnbench_fast.{name}.task").ImageNetTask
    init, at_timed_init = trainer.init_model, []

    def init_model(self):
        if self.cfg.seed != WARMUP_SEED:  # the timed run's model: what compiles after this is on the clock
            at_timed_init.append(len(graphs))
        init(self)

    trainer.init_model = init_model
    code = dist_driver.main()
    if int(os.environ.get("RANK", "0")) == 0:
        record = json.loads(out.read_text())
        record.update(graphs_warm_up=at_timed_init[0], graphs=len(graphs),
                      graph_breaks=sum(torch._dynamo.utils.counters["graph_break"].values()))
        out.write_text(json.dumps(record))
    return code


if __name__ == "__main__":
    sys.exit(main())
