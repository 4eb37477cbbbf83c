"""The evaluation's cascade (recipe field ``tta_shift_below``): an unsure
image takes its mirror first, and only the images the two views leave below
``tta_shift_below`` take the four shifted views. Each image ends with the
logits of the level its confidence earned (one view, the mirrored pair, or
all six views, with airbench's weights); the pass reads the host twice; on
CUDA both steps pad to the buckets the warm-up runs; the CPU recipe
cascades and the GPU's does not; a saved model is evaluated and timed with
its own TTA fields."""

from __future__ import annotations

import pytest
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast.cifar import Config, tta
from dawnbench_fast.cifar import cli as cifar_cli
from dawnbench_fast.cifar.recipe import EVALUATION_FIELDS, RECIPES, evaluated_as, validate
from dawnbench_fast.cifar.task import load_model_and_config, save_model
from dawnbench_fast.cifar.tta import (
    bucket,
    bucket_sizes,
    selective_tta_logits,
    selective_tta_pass,
    tta_logits,
    warm_up_selective_pass,
)
from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.models.cifar_net import CifarNet, FoldedCifarNet


def _linear(seed: int, side: int = 6, scale: float = 0.3):
    """A model whose row's logits are its own (as the folded net's), in float64, recording its batch sizes."""
    w = torch.randn(3 * side * side, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    calls: list[int] = []

    def model(v: torch.Tensor) -> torch.Tensor:
        calls.append(len(v))
        return (v.flatten(1) @ w) * scale

    return model, calls


def _split(model, x: torch.Tensor, below_q: float, shift_q: float) -> tuple[float, float, dict]:
    """Thresholds at these quantiles and the three sets they make: sure after one view,
    sure after the mirror, and the rest."""
    one = model(x)
    c1 = one.softmax(1).amax(1)
    below = float(c1.quantile(below_q))
    unsure = c1 < below
    pair = tta_logits(model, x, 1)
    c2 = pair.softmax(1).amax(1)
    shift_below = float(c2[unsure].quantile(shift_q))
    still = unsure & (c2 < shift_below)
    sets = {"one": ~unsure, "pair": unsure & ~still, "all": still}
    return below, shift_below, {"logits": {"one": one, "pair": pair, "all": tta_logits(model, x, 2)}, **sets}


@pytest.mark.parametrize("seed, n, below_q, shift_q",
                         [(0, 40, 0.5, 0.5), (1, 37, 0.7, 0.3), (2, 64, 0.3, 0.8)])
def test_each_image_ends_with_the_level_its_confidence_earned(seed, n, below_q, shift_q):
    model, calls = _linear(seed)
    x = torch.randn(n, 3, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(10 + seed))
    below, shift_below, ref = _split(model, x, below_q, shift_q)
    assert all(ref[k].any() for k in ("one", "pair", "all"))  # the thresholds split the images three ways
    calls.clear()
    got = selective_tta_logits(model, x, 2, below, shift_below=shift_below)
    for k in ("one", "pair", "all"):
        want = ref["logits"][k][ref[k]].to(got.dtype)
        torch.testing.assert_close(got[ref[k]], want, rtol=1e-12, atol=1e-12)
    # the views a forward: one for all, the mirror for the unsure, four shifted for the still unsure
    unsure, still = int((~ref["one"]).sum()), int(ref["all"].sum())
    assert calls == [n, unsure, 4 * still]
    # one image at a time (the latency loop) gives the same rows
    rows = torch.cat([selective_tta_logits(model, x[i:i + 1], 2, below, shift_below=shift_below)
                      for i in range(n)])
    torch.testing.assert_close(rows, got, rtol=1e-12, atol=1e-12)


def test_at_one_the_cascade_is_off_and_the_unsure_take_all_five_views_at_once():
    model, calls = _linear(3)
    x = torch.randn(30, 3, 6, 6, dtype=torch.float64)
    below = float(model(x).softmax(1).amax(1).quantile(0.5))
    calls.clear()
    one_step = selective_tta_logits(model, x, 2, below, shift_below=1.0)
    assert calls == [30, 5 * 15]
    assert not tta.cascades(2, 1.0) and not tta.cascades(1, 0.5) and tta.cascades(2, 0.6)
    calls.clear()
    # at level 1 there is nothing to cascade: the mirror alone, in one step
    torch.testing.assert_close(selective_tta_logits(model, x, 1, below, shift_below=0.5),
                               selective_tta_logits(model, x, 1, below), rtol=0, atol=0)
    assert one_step.shape == (30, 10)


def test_with_every_image_unsure_every_image_takes_the_mirror_without_a_read(monkeypatch):
    model, calls = _linear(4)
    x = torch.randn(20, 3, 6, 6, dtype=torch.float64)
    pair = tta_logits(model, x, 1)
    shift_below = float(pair.softmax(1).amax(1).quantile(0.5))
    reads = []
    nonzero = torch.Tensor.nonzero
    monkeypatch.setattr(torch.Tensor, "nonzero", lambda t, *a, **k: reads.append(1) or nonzero(t, *a, **k))
    calls.clear()
    got = selective_tta_logits(model, x, 2, 1.0, shift_below=shift_below)
    assert calls == [20, 20, 4 * 10] and len(reads) == 1  # the one read: the still unsure
    still = pair.softmax(1).amax(1) < shift_below
    torch.testing.assert_close(got[~still], pair[~still], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got[still], tta_logits(model, x, 2)[still], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pad", [False, True])
def test_the_pass_reads_twice_and_gives_the_per_batch_cascade(monkeypatch, pad):
    model, _ = _linear(5)
    x = torch.randn(130, 3, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    below, shift_below, _ = _split(model, x, 0.6, 0.5)
    want = torch.cat([selective_tta_logits(model, x[i:i + 16], 2, below, 16, pad=pad, shift_below=shift_below)
                      for i in range(0, 130, 16)])
    reads = []
    nonzero = torch.Tensor.nonzero
    monkeypatch.setattr(torch.Tensor, "nonzero", lambda t, *a, **k: reads.append(1) or nonzero(t, *a, **k))
    got = selective_tta_pass(model, x, 2, below, view_batch=50, cap=16, pad=pad, shift_below=shift_below)
    assert len(reads) == 2  # the unsure set's size, then the still unsure's
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def _poisoned_pad(t: torch.Tensor, size: int) -> torch.Tensor:
    """The pad poisoned with NaN and huge rows, where tta.pad_rows copies a real row."""
    pad = torch.full((size - len(t), *t.shape[1:]), float("nan"), dtype=t.dtype)
    pad[: len(pad) // 2] = 3e4
    return torch.cat([t, pad])


def test_padding_both_steps_changes_no_row_even_with_a_poisoned_pad(monkeypatch):
    model, calls = _linear(7)
    x = torch.randn(37, 3, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    below, shift_below, ref = _split(model, x, 0.6, 0.4)
    unsure, still = int((~ref["one"]).sum()), int(ref["all"].sum())
    assert bucket(unsure, 37) > unsure and bucket(still, 37) > still  # both sets padded
    plain = selective_tta_logits(model, x, 2, below, cap=37, pad=False, shift_below=shift_below)
    monkeypatch.setattr(tta, "pad_rows", _poisoned_pad)
    calls.clear()
    padded = selective_tta_logits(model, x, 2, below, cap=37, pad=True, shift_below=shift_below)
    assert calls == [37, bucket(unsure, 37), 4 * bucket(still, 37)]
    assert padded.isfinite().all()
    torch.testing.assert_close(padded, plain, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n, view_batch, cap", [(100, 70, 40), (7, 40, 40), (333, 2000, 333)])
def test_the_warm_up_runs_every_shape_a_cascading_evaluation_can_meet(n, view_batch, cap):
    w = torch.randn(3 * 4 * 4, 10) * 0.5
    images = torch.randn(n, 3, 4, 4)
    sizes: list[int] = []

    def model(v: torch.Tensor) -> torch.Tensor:
        sizes.append(len(v))
        return v.flatten(1) @ w

    with torch.no_grad():
        warm_up_selective_pass(model, images, 2, 0.5, view_batch, cap, pad=True, shift_below=0.5)
        warmed = set(sizes)
        assert {4 * m for m in bucket_sizes(cap) if m <= n} <= warmed
        one = model(images)
        pair = tta_logits(model, images, 1)
        qs = torch.tensor([0.1, 0.5, 0.9])
        for below in [0.0, *one.softmax(1).amax(1).quantile(qs).tolist(), 1.0]:
            for shift_below in [*pair.softmax(1).amax(1).quantile(qs).tolist(), 0.999999]:
                sizes.clear()
                selective_tta_pass(model, images, 2, below, view_batch, cap, pad=True,
                                   shift_below=shift_below)
                assert set(sizes) <= warmed, (below, shift_below, sorted(set(sizes) - warmed))


def test_the_cpu_recipe_cascades_and_the_gpu_default_does_not():
    assert Config().tta_shift_below == 1.0  # the GPU's default: no measurement of a cascade there
    cpu = Config(**RECIPES["dawnbench_fast_cpu"])
    assert cpu.tta_shift_below == 0.6 and cpu.tta_below == 0.8 and cpu.tta_level == 2
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ConfigError, match="tta_shift_below"):
            validate(Config(tta_shift_below=bad))


# a small net's config, evaluated at level 1 with the threshold and cascade no default has
SAVED = Config(widths=(8, 8, 8), tta_below=0.7, tta_shift_below=0.6, tta_level=1)


def _small_model() -> CifarNet:
    torch.manual_seed(0)
    model = CifarNet(widths=(8, 8, 8))
    model.init_whitening(torch.randn(64, 3, 32, 32), eps=5e-4)
    return model.eval()


def test_a_saved_model_keeps_its_evaluation_fields_and_old_files_take_one_step(tmp_path):
    path = tmp_path / "m.pt"
    save_model(_small_model(), SAVED, path)
    _, saved = load_model_and_config(path)
    assert (saved.tta_level, saved.tta_below, saved.tta_shift_below) == (1, 0.7, 0.6)
    cfg = evaluated_as(Config(eval_subset=5), saved)
    assert cfg.eval_subset == 5 and all(getattr(cfg, f) == getattr(saved, f) for f in EVALUATION_FIELDS)
    # a file written before the cascade existed has no such field: its runs took all views at once
    payload = torch.load(path, weights_only=True)
    del payload["config"]["tta_shift_below"]
    torch.save(payload, path)
    assert load_model_and_config(path)[1].tta_shift_below == 1.0


@pytest.mark.parametrize("flag, level", [([], 1), (["--tta-level", "2"], 2)])
def test_evaluate_uses_the_saved_models_tta_unless_told(monkeypatch, tmp_path, flag, level):
    path = tmp_path / "m.pt"
    save_model(_small_model(), SAVED, path)
    seen = {}

    def fake_evaluate(model, data, cfg, device, tta_level):
        seen.update(cfg=cfg, level=tta_level)
        return 0.5

    monkeypatch.setattr(cifar_cli, "evaluate", fake_evaluate)
    argv = ["evaluate", str(path), "--data-dir", str(cifar_dir()), "--no-download", "--eval-subset", "20",
            *flag]
    assert cifar_cli.main(argv) == 0
    assert seen["level"] == level
    assert (seen["cfg"].tta_below, seen["cfg"].tta_shift_below) == (0.7, 0.6)


def test_the_trainers_evaluation_and_latency_loop_cascade_as_the_recipe_says(monkeypatch):
    sizes: list[int] = []
    forward = FoldedCifarNet.forward
    monkeypatch.setattr(FoldedCifarNet, "forward", lambda self, x: sizes.append(len(x)) or forward(self, x))
    cfg = Config(subset=64, batch_size=32, eval_subset=100, whiten_images=64, widths=(8, 8, 8), epochs=1,
                 device="cpu", kernels="torch", precision="fp32", data_dir=str(cifar_dir()), download=False,
                 eval_batch_size=120, tta_below=1.0, tta_shift_below=0.99)
    task = cfg.build_task(torch.device("cpu"))
    task.init_model()
    with task.predictor(tta=False) as (predict, images, _, _):
        assert predict(images).softmax(1).amax(1).max() < 0.9  # untrained: every image stays unsure
    sizes.clear()
    task.evaluate(tta=True)
    # one view of all 100 in one forward; then, 120 // 6 = 20 images at a time, their mirrors, then
    # their four shifted views (one step would be five forwards of 5 x 20)
    assert sizes == [100] + [20] * 5 + [80] * 5
    sizes.clear()
    with task.predictor(tta=True) as (predict, images, _, _):
        predict(images[:1])
    assert sizes == [1, 1, 4]


@pytest.mark.parametrize("level", [1, 2])
def test_the_views_of_bf16_logits_are_summed_in_fp32_in_either_form(level):
    """bf16 logits of about 10 lie 0.06 apart: a weighted mean rounded to them turns near ties
    either way. One step and the cascade both sum the views in fp32."""
    model64, _ = _linear(9, scale=3.0)
    x = torch.randn(50, 3, 6, 6, dtype=torch.float64)

    def model(v: torch.Tensor) -> torch.Tensor:  # a net computing in bf16 under autocast
        return model64(v).to(torch.bfloat16)

    weights = torch.tensor(tta.TTA_WEIGHTS[level], dtype=torch.float32)
    views = torch.stack([model(v).float() for v in tta.tta_views(x, level)])
    want = torch.einsum("v,vnk->nk", weights, views)
    got = tta_logits(model, x, level)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    # the cascade's steps: the mirror from the one view, then the shifts from the pair
    known = model(x)
    for step in range(1, level + 1):
        known = tta.refined_logits(model, x, known, step)
    assert known.dtype == torch.float32
    torch.testing.assert_close(known, want, rtol=1e-6, atol=1e-6)
    assert (want.abs() > 5).any()  # logits large enough that bf16's spacing matters
