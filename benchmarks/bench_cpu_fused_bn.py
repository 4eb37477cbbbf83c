"""The fused memory-bound passes of the ``cpu`` backend's conv group, old vs
new (csrc/bn_act_pool_cpu.cpp, bn_act.py's pool_bn_act), under pytest-benchmark:

- ops (``test_ops``): at the CIFAR net's six BN layers (batch
  ``BENCH_BATCH``, bf16 channels_last): after conv1, ATen's max-pool + csrc
  bn_act with the old loops ("old") against the fused pool_bn_act ("new");
  after conv2, csrc bn_act with the old loops against the vectorised NHWC
  loops. Forward, and forward + backward; ``extra_info`` has each new pass's
  achieved GB/s (its minimal bytes / its time) and the copy bandwidth
  measured in the same run.
- group (``test_group``): each conv group forward + backward (the cpu
  backend's conv_group).
- step (``test_step``): the recipe's whole training step (``--kernels cpu``;
  needs CIFAR-10, ``DAWNBENCH_DATA``).

    python -m pytest benchmarks/bench_cpu_fused_bn.py [-k "ops or group"] [--benchmark-autosave]
    python benchmarks/bench_cpu_fused_bn.py --batch 2000 --reps 5 [--what ops,group,step]   # the same

"old" = ``conv_group.FUSED_POOL = False``; in the ops rows also the
extension's NHWC bn_act loops off against on (``set_nhwc_kernels_enabled``;
the group and step rows leave them at the default, on, as the cpu backend
runs); everything else identical. ``BENCH_BATCH`` (default 2000),
``BENCH_ROUNDS`` timed rounds (default 5) after one warm-up; old and new
each run their rounds back to back (the script before alternated them
within each round). Needs the C++ build; skipped without it.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
import time

import pytest
import torch
import torch.nn.functional as F
from knobs import env_int

from dawnbench_fast.csrc import conv_group
from dawnbench_fast.models.layers import BatchNorm, ConvGroup

BATCH = env_int("BENCH_BATCH", 2000)
ROUNDS = env_int("BENCH_ROUNDS", 5)
# (Cin, Cout, side of the conv output) per group: pool after conv1, then conv2's BN.
GROUPS = [(24, 64, 31), (64, 256, 15), (256, 256, 7)]


@pytest.fixture
def variant(native_build):
    """Switches old/new (``set(new, loops)``) and restores the defaults after."""
    fused, nhwc = conv_group.FUSED_POOL, native_build.nhwc_kernels_enabled()

    def set_variant(new: bool, loops: bool) -> None:
        conv_group.FUSED_POOL = new
        native_build.set_nhwc_kernels_enabled(new if loops else nhwc)

    yield set_variant
    conv_group.FUSED_POOL = fused
    native_build.set_nhwc_kernels_enabled(nhwc)


@pytest.fixture(scope="module")
def copy_gbs() -> float:
    """This machine's copy bandwidth now (GB/s), the yardstick of the passes."""
    src = torch.randn(32 * 2**20)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(7):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / best / 1e9


def _pass_gbs(mod, x: torch.Tensor, y_numel: int, pool: bool, fwd: bool) -> list[float]:
    """Minimal bytes of each pass of the last native call / its time (the
    backward's passes after a forward + backward), in GB/s."""
    item = x.element_size()
    full, small = x.numel() * item, y_numel * item
    if fwd:
        nbytes = [full + small + y_numel, 2 * small] if pool else [full, 2 * full]
    else:
        nbytes = [2 * small, 2 * small + y_numel + full] if pool else [2 * full, 3 * full]
    return [b / max(mod.nhwc_last_pass_seconds(i), 1e-9) / 1e9 for i, b in enumerate(nbytes)]


LAYERS = [(c, side, pool) for _cin, c, side in GROUPS for pool in (True, False)]
LAYER_IDS = [f"{'pool+' if p else ''}bn+gelu-{c}x{s if p else s // 2}" for c, s, p in LAYERS]


@pytest.mark.parametrize("which", ["old", "new"])
@pytest.mark.parametrize("direction", ["fwd", "fwd+bwd"])
@pytest.mark.parametrize("c,side,pool", LAYERS, ids=LAYER_IDS)
def test_ops(benchmark, native_build, variant, copy_gbs, which, direction, c, side, pool):
    from dawnbench_fast.csrc.bn_act import bn_act, pool_bn_act

    hw = side if pool else side // 2
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(BATCH, c, hw, hw, generator=gen) + 0.3).bfloat16()
    x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
    bn = BatchNorm(c)
    if which == "new" and pool:
        fn = lambda x: pool_bn_act(x, bn, "gelu")  # noqa: E731
    elif pool:
        fn = lambda x: bn_act(F.max_pool2d(x, 2), bn, "gelu")  # noqa: E731
    else:
        fn = lambda x: bn_act(x, bn, "gelu")  # noqa: E731
    variant(which == "new", loops=True)
    y = fn(x.detach())
    g = torch.randn(y.shape, generator=gen).bfloat16().contiguous(memory_format=torch.channels_last)
    step = (lambda: fn(x.detach())) if direction == "fwd" else (lambda: fn(x).backward(g))
    benchmark.group = f"{'pool+' if pool else ''}bn+gelu {c}x{hw}x{hw} {direction}, batch {BATCH}, bf16"
    benchmark.pedantic(step, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    benchmark.extra_info["copy_gbs"] = copy_gbs
    if which == "new":
        step()  # the last native call: this direction's two passes
        benchmark.extra_info["pass_gbs"] = _pass_gbs(native_build, x, y.numel(), pool, direction == "fwd")


@pytest.mark.parametrize("which", ["old", "new"])
@pytest.mark.parametrize("cin,cout,side", GROUPS, ids=[f"{a}->{b}@{s}" for a, b, s in GROUPS])
def test_group(benchmark, native_build, variant, which, cin, cout, side):
    from dawnbench_fast.csrc.bn_act import bn_act

    gen = torch.Generator().manual_seed(1)
    grp = copy.deepcopy(ConvGroup(cin, cout))
    grp.bn_act = bn_act
    x = torch.randn(BATCH, cin, side, side, generator=gen).bfloat16()
    x = x.contiguous(memory_format=torch.channels_last).requires_grad_()

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = conv_group.conv_group_cpu(grp, x)
        y.float().sum().backward()

    variant(which == "new", loops=False)
    benchmark.group = f"conv group {cin}->{cout} @ {side} fwd+bwd, batch {BATCH}, bf16"
    benchmark.pedantic(step, rounds=ROUNDS, iterations=1, warmup_rounds=1)


@pytest.mark.parametrize("which", ["old", "new"])
def test_step(benchmark, cifar10, native_build, variant, which):
    from dawnbench_fast.cifar import CifarTask, Config
    from dawnbench_fast.config.precision import with_resolved_precision
    from dawnbench_fast.data.cifar10_device import prepare_data

    # the 32-px step (the recipe's first epochs train smaller: progressive)
    cfg = dataclasses.replace(Config(), subset=BATCH * 3, batch_size=BATCH, progressive=(), kernels="cpu",
                              whiten_images=min(BATCH * 3, Config().whiten_images))
    cfg, _ = with_resolved_precision(cfg, torch.device("cpu"))
    t = CifarTask(cfg, prepare_data(cifar10, cfg, torch.device("cpu")), torch.device("cpu"), "cpu")
    t.init_model()
    batches = list(t.epoch_batches(0))
    variant(which == "new", loops=False)
    for b in batches[:2]:  # warm-up: oneDNN primitives, allocator growth
        t.train_step(*b)
    benchmark.group = f"training step (--kernels cpu), batch {BATCH}"
    benchmark.pedantic(lambda: t.train_step(*batches[2]), rounds=ROUNDS, iterations=1)
    benchmark.extra_info["precision"] = cfg.precision


def main(argv: list[str] | None = None) -> int:
    import script_entry

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="other arguments go to pytest")
    ap.add_argument("--batch", type=int, help="images (BENCH_BATCH)")
    ap.add_argument("--reps", type=int, help="timed rounds (BENCH_ROUNDS)")
    ap.add_argument("--what", default="ops,group,step", help="comma-separated: ops, group, step")
    ap.add_argument("--json", help="also write pytest-benchmark's JSON here")
    args, rest = ap.parse_known_args(argv)
    select = [f"test_{w}" for w in args.what.split(",") if w]
    return script_entry.run(__file__, {"BENCH_BATCH": args.batch, "BENCH_ROUNDS": args.reps}, args.json,
                            select=select, pytest_args=rest)


if __name__ == "__main__":
    sys.exit(main())
