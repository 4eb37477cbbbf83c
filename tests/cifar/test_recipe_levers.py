"""The 2026 record's levers as our recipe runs them: the downsampled
resolutions against the bilinear contract computed by hand, the steps and
learning-rate table against a hand count, the renormalisation ramp, the
end-of-run weight average against a hand-computed sequence, and a run
resumed in the middle of the curriculum and of the average."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from support.cifar_data import cifar_dir
from support.resume import assert_same_weights, stopped_and_resumed, train_epochs

from dawnbench_fast.cifar import RECIPES, Config
from dawnbench_fast.data.progressive import downsample
from dawnbench_fast.optim.muon import Muon, norm_period
from dawnbench_fast.training.weight_average import TailAverage

# Bilinear, align_corners=False, no antialias: output pixel i reads the input at
# s = (i + 0.5) * n_in / n_out - 0.5 (clamped at 0), between floor(s) and the next pixel.
# 5 -> 3: s = 1/3, 2, 11/3.
HAND_5_TO_3 = [[2 / 3, 1 / 3, 0, 0, 0],
               [0, 0, 1, 0, 0],
               [0, 0, 0, 1 / 3, 2 / 3]]
# 7 -> 5: s = 0.2, 1.6, 3.0, 4.4, 5.8.
HAND_7_TO_5 = [[0.8, 0.2, 0, 0, 0, 0, 0],
               [0, 0.4, 0.6, 0, 0, 0, 0],
               [0, 0, 0, 1, 0, 0, 0],
               [0, 0, 0, 0, 0.6, 0.4, 0],
               [0, 0, 0, 0, 0, 0.2, 0.8]]
RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n_in,weights", [(5, HAND_5_TO_3), (7, HAND_7_TO_5)])
def test_downsample_is_bilinear_with_half_pixel_centres(n_in, weights, dtype):
    gen = torch.Generator().manual_seed(n_in)
    x = torch.randn(3, 3, n_in, n_in, generator=gen).to(dtype).contiguous(memory_format=torch.channels_last)
    w = np.asarray(weights, dtype=np.float64)
    assert np.allclose(w.sum(1), 1.0)
    # each output pixel is the weighted sum of rows, then of columns: W x W^T per image and channel
    expected = np.einsum("ij,ncjk,lk->ncil", w, x.double().numpy(), w)
    out = downsample(x, len(w))
    assert out.shape == (3, 3, len(w), len(w)) and out.dtype == dtype
    assert out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out.double(), torch.from_numpy(expected), **TOL[dtype])
    assert downsample(x, n_in) is x  # the full side is left alone


def _task(subset: int = 384, **fields) -> object:
    """A tiny task: 384 images, 6 steps of 64 an epoch."""
    cfg = Config(subset=subset, eval_subset=100, batch_size=64, whiten_images=64, widths=(8, 16, 16),
                 kernels="torch", precision="fp32", data_dir=str(cifar_dir()), download=False, **fields)
    return cfg.build_task(torch.device("cpu"))


def test_downsampled_epochs_resize_the_jittered_full_batch():
    base = dict(epochs=3, progressive=(20, 27), progressive_mode="downsample")
    full = _task(**{**base, "progressive": ()})
    task = _task(**base)
    assert task.warm_up_epochs == (0, 1, 2)
    full.init_model()
    task.init_model()
    for epoch, side in enumerate((20, 27, 32)):
        (a,), (b,) = next(task.epoch_batches(epoch)), next(full.epoch_batches(epoch))
        x, y = task.batch_of(a), full.batch_of(b)
        assert torch.equal(a.idx, b.idx) and x.shape[-2:] == (side, side)
        # the resize of the jittered 32-px batch (the jitter of a resized one differs in rounding)
        assert torch.equal(x, downsample(y, side))


def test_the_record_s_steps_and_learning_rates_against_a_hand_count():
    # the full set: 50,000 // 1536 = 32 steps an epoch; 8.875 epochs = 8 x 32 + 28 = 284 steps,
    # the decay over 8.5 epochs = 272 steps; the whitening bias 0.2 x 32 = 6.4 -> 7 steps
    cfg = Config(**RECIPES["fulcrum"], data_dir=str(cifar_dir()), download=False)
    full = cfg.build_task(torch.device("cpu"))
    assert full.epoch_steps == [32] * 8 + [28]
    assert (full.total_steps, full.decay_steps, full.whiten_bias_steps) == (284, 272, 7)
    # the tiny set: 6 steps an epoch; 2.875 epochs: the last 0.875 x 6 = 5.25 -> 6; the decay
    # over 2.5 epochs: 2 x 6 + 3 = 15 steps; the bias: 0.2 x 6 = 1.2 -> 2 steps
    fields = {k: v for k, v in RECIPES["fulcrum"].items() if k not in ("whiten_images", "progressive")}
    task = _task(**{**fields, "epochs": 2.875})  # the record's hold: the last 0.375 epochs
    assert task.epoch_steps == [6] * 3
    assert (task.total_steps, task.decay_steps, task.whiten_bias_steps) == (18, 15, 2)
    task.init_model()
    table = []
    for epoch in range(3):
        for b in task.epoch_batches(epoch):
            if task.step == task.total_steps:
                break
            task.train_step(*b)
            table.append(task.learning_rates())
    assert len(table) == 18
    cfg = task.cfg
    for s, lrs in enumerate(table):
        f = max(0.05, 1 - s / 15)  # linear to 0 at step 15, held at 0.05 from step 15 (1 - 14/15 > 0.05)
        assert lrs["filters"] == pytest.approx(cfg.lr_filters * f, rel=1e-12)
        assert lrs["head"] == pytest.approx(cfg.lr_head * f, rel=1e-12)
        assert lrs["norm_biases"] == pytest.approx(cfg.lr_bias * f, rel=1e-12)
        assert lrs["whiten_bias"] == pytest.approx(cfg.lr_bias * max(0.0, 1 - s / 2), rel=1e-12)
    assert table[14]["filters"] == pytest.approx(cfg.lr_filters / 15) and 1 / 15 > 0.05
    assert table[15]["filters"] == table[17]["filters"] == pytest.approx(cfg.lr_filters * 0.05)


def test_the_renormalisation_ramp_against_a_hand_count():
    # the record's 2 + int(15 x step / 284): period 2 until 15 x s / 284 reaches 1 at s = 19
    assert [norm_period(s, 2, 15, 284) for s in (1, 18, 19, 37, 38, 284)] == [2, 2, 3, 3, 4, 17]
    last, steps = 0, []
    for s in range(1, 30):
        if s - last >= norm_period(s, 2, 15, 284):
            last = s
            steps.append(s)
    assert steps == [2, 4, 6, 8, 10, 12, 14, 16, 18, 21, 24, 27]


@pytest.mark.parametrize("norm_every,norm_ramp,expected",
                         [(3, 0, [3, 6]), (1, 3, [1, 2, 4]), (2, 0, [2, 4, 6])])
def test_muon_renormalises_on_the_ramp_s_steps(norm_every, norm_ramp, expected):
    # 1 + int(3 s / 7): periods 1, 1, 2, 2, 3, 3, 4 for steps 1-7: renormalised at 1, 2, 4
    gen = torch.Generator().manual_seed(3)
    p = torch.nn.Parameter(torch.randn(5, 4, 3, 3, generator=gen))
    opt = Muon([p], lr=1e-6, momentum=0.6, ns_steps=3, norm_every=norm_every, norm_ramp=norm_ramp,
               total_steps=7)
    renormalised = []
    for step in range(1, 8):
        with torch.no_grad():
            p.mul_(10.0 / p.norm())  # far from sqrt(5): a renormalisation shows in the norm
        p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
        if abs(p.norm().item() - 5 ** 0.5) < 1e-3:
            renormalised.append(step)
        else:
            assert abs(p.norm().item() - 10.0) < 1e-3
    assert renormalised == expected
    assert torch.nonzero(opt.renorm_table(0, p.device)[1:8]).flatten().add(1).tolist() == expected


def test_the_weight_average_against_a_hand_computed_sequence():
    net = torch.nn.BatchNorm1d(2)  # parameters, float running statistics and an integer counter
    avg = TailAverage(net, start=3, every=2, weight=0.3)
    seen = {}
    for step in range(1, 8):
        with torch.no_grad():  # what the optimiser would have set: every float tensor = step
            for t in net.state_dict().values():
                if t.is_floating_point():
                    t.fill_(float(step))
            net.num_batches_tracked.fill_(100 + step)
        avg.after_step(step)
        seen[step] = (net.weight[0].item(), net.running_var[1].item(), net.num_batches_tracked.item())
        if step == 5:
            saved = avg.state_dict()
    # step 3: the average is a copy (3); step 5: 0.7 x 3 + 0.3 x 5 = 3.6, the net set to it;
    # step 7: 0.7 x 3.6 + 0.3 x 7 = 4.62; other steps leave the net as trained
    want = {1: 1, 2: 2, 3: 3, 4: 4, 5: 3.6, 6: 6, 7: 4.62}
    for step, value in want.items():
        assert seen[step][:2] == pytest.approx((value, value), rel=1e-6)
        assert seen[step][2] == 100 + step  # not averaged
    again = TailAverage(net, start=3, every=2, weight=0.3)
    again.load_state_dict(saved)
    assert saved[0][0].item() == pytest.approx(3.6) and again.average[0] is not saved[0]


def test_a_run_resumed_mid_curriculum_and_mid_average_is_the_uninterrupted_run():
    # 3 steps an epoch at 20, 24, 32 px; the decay ends at step 6 (2 epochs), the average
    # starts at step 2 and sets the net at steps 4, 6, 8: the checkpoint after the first
    # epoch (step 3) holds an average, and the resumed run changes resolution
    fields = dict(subset=192, epochs=3, progressive=(20, 24), progressive_mode="downsample",
                  lr_hold_epochs=1, lr_floor=0.1, average_every=2, average_from=4, filter_norm_every=1,
                  filter_norm_ramp=3, deterministic=True)

    straight = _task(**fields)
    straight.init_model()
    train_epochs(straight, range(3))
    first, resumed = stopped_and_resumed(lambda: _task(**fields), 1, 3)
    assert first.averager.average is not None
    assert resumed.step == straight.step == 9
    assert_same_weights(straight, resumed)
    # and the average did something: without it the weights differ
    plain = _task(**{**fields, "average_every": 0})
    plain.init_model()
    train_epochs(plain, range(3))
    assert not torch.equal(plain.model.head.weight, straight.model.head.weight)


def test_the_lesion_finds_every_new_lever():
    from dawnbench_fast.analyze.lesion import recipe_arms
    from dawnbench_fast.cifar.recipe import apply_overrides

    names = {a.name for a in recipe_arms("fulcrum")}
    for lever in ("progressive", "progressive_mode", "lr_hold_epochs", "lr_floor", "average_every",
                  "filter_norm_ramp", "lr_filters"):
        assert f"recipe_{lever}" in names
    # the arm that switches the curriculum off sets it empty, which --set takes
    arm = next(a for a in recipe_arms("fulcrum") if a.name == "recipe_progressive")
    assert arm.flags == ["--set", "progressive="]
    cfg = apply_overrides(Config(**RECIPES["fulcrum"]), arm.flags[1:])
    assert cfg.progressive == () and cfg.epochs == 8.875
    published = dataclasses.replace(Config(), **RECIPES["airbench94_muon"])
    assert (published.average_every, published.lr_floor, published.filter_norm_ramp) == (0, 0.0, 0)


# The newest committed runs of the default recipe: its comparison against the published recipe
# (recipe dawnbench_fast) and its ten-seed record, which ran ``--recipe fulcrum --epochs 9.5``
# before the default took those values.
DEFAULT_RUNS = [RESULTS / "compare-issue43-amx" / "ours-0" / "run.json",
                RESULTS / "seeds-issue43-amx" / "seed0" / "run.json"]
# Fields a run records as it ran them, not as the recipe sets them (the precision resolved from
# auto, the data's folder, the recipe's name), and fields added to Config after those runs
# (execution choices, not the recipe's values; the evaluation's cascade, whose default, off, is
# how those runs evaluated).
AS_RUN = {"precision", "data_dir", "extra"}
AFTER_THE_RUNS = {"capture", "compile_mode", "tta_shift_below"}


@pytest.mark.parametrize("path", DEFAULT_RUNS, ids=lambda p: p.parent.parent.name)
def test_the_default_is_the_committed_runs_config(path):
    """Config() field for field against run.json's ``config`` of the committed runs of the
    default (docs/RUN_JSON.md): a changed default value fails here until a run of the new
    default is committed and named above."""
    recorded = json.loads(path.read_text())["config"]
    default = json.loads(json.dumps(dataclasses.asdict(Config())))  # tuples as the JSON's lists
    assert set(default) - set(recorded) == AFTER_THE_RUNS, "a Config field the runs did not record"
    changed = {k: (v, recorded[k]) for k, v in default.items()
               if k in recorded and k not in AS_RUN and v != recorded[k]}
    assert not changed, f"defaults (now, in {path.relative_to(RESULTS)}) differ: {changed}"


def test_the_default_is_the_record_s_levers_for_9_5_epochs():
    """The default's values are the fulcrum recipe's for 9.5 epochs (as its ten-seed record ran)."""
    assert dataclasses.replace(Config(), **{**RECIPES["fulcrum"], "epochs": 9.5}) == Config()
    before = Config(**RECIPES["dawnbench_fast_2025"])
    assert (before.epochs, before.progressive, before.average_every) == (8.5, (), 0)
    assert (before.whiten_images, before.lr_filters, before.filter_norm_every) == (960, 0.205, 8)
    assert Config(**RECIPES["hiverge"]) == dataclasses.replace(before, epochs=7.63)
