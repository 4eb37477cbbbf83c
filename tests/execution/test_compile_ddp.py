"""``torch.compile`` of the ImageNet step around a DistributedDataParallel
model: the Trainer compiles its step function, forward_loss, and
hands it ``self.model``, which in a torchrun job is the DDP wrapper. Dynamo
breaks the graph at DDP's own forward (its bookkeeping is not traced),
compiles the ResNet's forward as one graph under its DDPOptimizer (split at
DDP's gradient buckets, so the all-reduce can still overlap the backward) and
the loss as a second. Here two gloo processes on the CPU train through that
path, compiled through AOTAutograd as Inductor compiles it but run without
code generation (``aot_eager``; Inductor's C++ compile of a ResNet would take
minutes on 2 cores).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from support import dist_compile_driver, dist_driver

from dawnbench_fast.data.imagenet.synthetic import make_image_folder

pytestmark = pytest.mark.e2e

# 96 training images in global batches of 16 for 2 epochs: 12 steps, one image side
ARGS = ["--epochs", "2", "--batch-size", "16", "--set", "arch=resnet18", "--set", "width=8",
        "--set", "min_res=32", "--set", "max_res=32", "--set", "val_res=32", "--set", "warmup_epochs=1",
        "--set", "lr_per_256=0.25", "--set", "zero_init_residual=true", "--precision", "fp32",
        "--threads", "1", "--latency-images", "2", "--no-progress"]


def test_the_compiled_step_trains_a_ddp_model_as_the_eager_step_does(tmp_path):
    data = make_image_folder(tmp_path / "data", classes=6, train_per_class=16, val_per_class=2, size=40)
    args = [*ARGS, "--data-dir", str(data)]
    compiled = dist_compile_driver.run("imagenet", tmp_path / "compiled.json",
                                       [*args, "--compile", "--out", str(tmp_path / "compiled")])
    eager = dist_driver.run("imagenet", tmp_path / "eager.json",
                            [*args, "--no-compile", "--out", str(tmp_path / "eager")], processes=2)
    assert len(compiled["losses"]) == len(eager["losses"]) == 12
    assert all(math.isfinite(x) for x in compiled["losses"])
    # after every step both ranks hold the same weights: each rank's gradients were all-reduced
    # (the ranks see different images), through the compiled backward
    assert compiled["weights_equal"] and eager["weights_equal"]
    # it really ran compiled: the net's forward and the loss, each one graph (a tiny net fills one
    # gradient bucket), all compiled in the warm-up and nothing on the clock
    graphs = {k: compiled[k] for k in ("graphs_warm_up", "graphs", "graph_breaks")}
    assert graphs["graphs_warm_up"] == graphs["graphs"] == 2 and graphs["graph_breaks"] > 0, graphs
    # the same training as the eager step's: AOTAutograd runs the same ATen ops (measured: the
    # same losses to the bit; 1e-5 leaves room for another torch's graph to reorder a sum)
    np.testing.assert_allclose(compiled["losses"], eager["losses"], rtol=1e-5)
    assert compiled["losses"][-1] < compiled["losses"][0]
