"""The CIFAR net: shapes, cost, init, Muon, and that training learns."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dawnbench_fast.cifar import Config
from dawnbench_fast.cifar.train_state import build_optimizers
from dawnbench_fast.cifar.tta import selective_tta_logits, tta_logits
from dawnbench_fast.models.cifar_net import CifarNet, macs_per_image, patch_eigens
from dawnbench_fast.optim.muon import newton_schulz
from dawnbench_fast.training.train import loss_trajectory


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_output_shapes(batch):
    net = CifarNet()
    out = net(torch.randn(batch, 3, 32, 32))
    assert out.shape == (batch, 10) and torch.isfinite(out).all()
    small = CifarNet(widths=(8, 16, 24))
    assert small(torch.randn(batch, 3, 32, 32)).shape == (batch, 10)


def test_forward_cost_is_the_published_118_15_m_mac():
    assert macs_per_image(CifarNet()) / 1e6 == pytest.approx(118.15, abs=0.005)


def test_frozen_and_trainable_parameters():
    net = CifarNet()
    assert not net.whiten.weight.requires_grad and net.whiten.bias.requires_grad
    for g in net.groups:
        for bn in (g.norm1, g.norm2):
            assert not bn.weight.requires_grad and bn.bias.requires_grad
            assert bn.eps == 1e-12 and bn.momentum == pytest.approx(0.4)
        # Dirac init: the first in_channels filters are the identity.
        w = g.conv2.weight
        assert torch.equal(w[: w.size(1), :, 1, 1], torch.eye(w.size(1)))
    assert net.head.bias is None
    assert net.head.weight.std().item() == pytest.approx(1.0, abs=1e-5)


def test_whitening_init_matches_its_definition():
    torch.manual_seed(0)
    # Correlated channels, so whitening has something to undo.
    x = torch.randn(64, 3, 32, 32)
    x = x + 0.8 * x.roll(1, dims=1) + 0.5 * x.roll(1, dims=-1)
    net = CifarNet()
    net.init_whitening(x, eps=5e-4)
    w = net.whiten.weight.detach().double()
    half = w[:12].reshape(12, -1)
    assert torch.equal(w[12:], -w[:12]) and torch.equal(net.whiten.bias, torch.zeros(24))
    # Definition: eigen-decomposition of the 2x2 patch covariance.
    patches = x.unfold(2, 2, 1).unfold(3, 2, 1).permute(0, 2, 3, 1, 4, 5).reshape(-1, 12).double()
    cov = patches.T @ patches / len(patches)
    vals, vecs = torch.linalg.eigh(cov)
    expected = (vecs / torch.sqrt(vals + 5e-4)).T.flip(0)  # rows, largest eigenvalue first
    # Eigenvectors are defined up to sign.
    signs = torch.sign((half * expected).sum(1, keepdim=True))
    torch.testing.assert_close(half, expected * signs, rtol=1e-4, atol=1e-4)
    # And it whitens: W C W^T = diag(lambda / (lambda + eps)), close to I.
    white = half @ cov @ half.T
    torch.testing.assert_close(white, torch.diag(vals.flip(0) / (vals.flip(0) + 5e-4)),
                               rtol=1e-3, atol=1e-3)
    e_vals, _ = patch_eigens(x, 2)
    torch.testing.assert_close(e_vals.double(), vals.flip(0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(64, 216), (256, 2304), (300, 40)])
def test_newton_schulz_orthogonalises(shape):
    torch.manual_seed(1)
    g = torch.randn(shape)
    x = newton_schulz(g, steps=5).float()
    assert x.shape == g.shape
    # Singular values are pushed into a band around 1 (quintic NS does not converge exactly).
    s = torch.linalg.svdvals(x)
    assert s.min() > 0.5 and s.max() < 1.3
    # Same singular vectors as g: x is close to U V^T.
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    cos = (x * (u @ vh)).sum() / (x.norm() * (u @ vh).norm())
    assert cos > 0.95


def test_optimizer_groups_cover_every_trainable_parameter():
    net = CifarNet()
    opts = build_optimizers(net, Config())
    grouped = {id(p) for o in opts for g in o.param_groups for p in g["params"]}
    trainable = {id(p) for p in net.parameters() if p.requires_grad}
    assert grouped == trainable
    assert sum(len(g["params"]) for g in opts[1].param_groups) == 6  # six conv filter banks


def test_a_few_training_steps_lower_the_loss(monkeypatch):
    from support.cifar_data import cifar_dir

    cfg = dataclasses.replace(Config(), subset=512, batch_size=128, widths=(16, 32, 32),
                              data_dir=str(cifar_dir()), download=False, kernels="torch",
                              whiten_images=512)
    losses = loss_trajectory(cfg, 12)
    assert len(losses) == 12 and all(map(lambda v: v == v, losses))
    assert sum(losses[-3:]) < 0.95 * sum(losses[:3])  # ln(10) = 2.30 at start
    # Deterministic for a seed.
    assert loss_trajectory(cfg, 3) == losses[:3]


def test_linear_decay_schedule_per_group():
    from dawnbench_fast.optim.schedule import linear_decay_table

    net = CifarNet(widths=(8, 8, 8))
    opts = build_optimizers(net, Config(), whiten_bias_steps=30)
    table = linear_decay_table(opts, 120, 100)
    assert table.shape == (121, 4) and table.dtype == torch.float64
    assert table[0].tolist() == [Config.lr_bias, Config.lr_bias, Config.lr_head, Config.lr_filters]
    assert table[15, 0] == pytest.approx(Config.lr_bias * 0.5)  # whiten bias
    assert table[15, 3] == pytest.approx(Config.lr_filters * 0.85)
    assert table[40, 0] == 0.0  # frozen with the bias
    assert table[40, 2] == pytest.approx(Config.lr_head * 0.6)
    assert (table[100:] == 0.0).all()
    floored = linear_decay_table(opts, 120, 100, floor=0.05)
    assert floored[110, 0] == 0.0 and floored[110, 3] == pytest.approx(Config.lr_filters * 0.05)
    # the doubles the host computes, as the Python-float rates were
    assert floored[37, 2].item() == Config.lr_head * (1.0 - 37 / 100)


def test_folded_inference_net_equals_eval_mode_net():
    from dawnbench_fast.models.cifar_net import FoldedCifarNet

    torch.manual_seed(4)
    net = CifarNet(widths=(16, 24, 40))
    net.train()
    for _ in range(3):  # give the BN layers non-trivial running statistics and biases
        net(torch.randn(8, 3, 32, 32) * 2 + 0.3)
    for p in net.parameters():
        if p.requires_grad and p.ndim == 1:
            p.data.normal_()
    net.eval()
    x = torch.randn(5, 3, 32, 32)
    with torch.no_grad():
        want = net(x)
        got = FoldedCifarNet(net)(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("level", [0, 1, 2])
def test_tta_logits_are_the_weighted_views_in_one_forward(level):
    torch.manual_seed(0)
    w = torch.randn(3 * 7 * 9, 10, dtype=torch.float64)
    calls = []

    def model(v: torch.Tensor) -> torch.Tensor:
        calls.append(len(v))
        return v.flatten(1) @ w

    x = torch.randn(5, 3, 7, 9, dtype=torch.float64)

    def mirrored(v):  # the published formula, view by view
        return 0.5 * (v.flatten(1) @ w) + 0.5 * (v.flip(-1).flatten(1) @ w)

    padded = torch.nn.functional.pad(x, (1, 1, 1, 1), mode="reflect")
    expected = {0: x.flatten(1) @ w, 1: mirrored(x),
                2: 0.5 * mirrored(x) + 0.25 * (mirrored(padded[..., :7, :9]) + mirrored(padded[..., 2:, 2:]))}
    torch.testing.assert_close(tta_logits(model, x, level), expected[level], rtol=1e-12, atol=1e-12)
    assert calls == [5 * (1, 2, 6)[level]]  # one forward for all the views


@pytest.mark.parametrize("share", [0.25, 0.6, 1.0])
def test_selective_tta_gives_the_views_only_to_unconfident_images(share):
    torch.manual_seed(1)
    w = torch.randn(3 * 6 * 6, 10, dtype=torch.float64) * 0.3
    x = torch.randn(40, 3, 6, 6, dtype=torch.float64)
    calls = []

    def model(v: torch.Tensor) -> torch.Tensor:
        calls.append(len(v))
        return v.flatten(1) @ w

    one = x.flatten(1) @ w
    conf = one.softmax(1).amax(1)
    below = 1.0 if share == 1.0 else float(conf.quantile(share))
    unsure = conf < below
    got = selective_tta_logits(model, x, 2, below)
    views = list(calls)
    full = tta_logits(model, x, 2)
    assert 0 < int(unsure.sum()) < len(x) or share == 1.0
    torch.testing.assert_close(got[unsure], full[unsure], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got[~unsure], one[~unsure], rtol=1e-12, atol=1e-12)
    # one view for all, then the 5 other views for the unconfident images only
    assert views == ([6 * len(x)] if share == 1.0 else [len(x), 5 * int(unsure.sum())])
    # each image's answer is its own: one image at a time (serving) gives the same rows
    rows = torch.cat([selective_tta_logits(model, x[i:i + 1], 2, below) for i in range(len(x))])
    torch.testing.assert_close(rows, got, rtol=1e-12, atol=1e-12)


def test_progressive_epochs_train_on_keyed_crops_of_the_full_batch():
    from support.cifar_data import cifar_dir

    base = Config(subset=300, eval_subset=100, batch_size=150, epochs=3, whiten_images=100, progressive=(),
                  progressive_mode="crop", kernels="torch", precision="fp32", data_dir=str(cifar_dir()),
                  download=False)
    full = base.build_task(torch.device("cpu"))
    task = dataclasses.replace(base, progressive=(20, 27)).build_task(torch.device("cpu"))
    assert full.warm_up_epochs == (0,) and task.warm_up_epochs == (0, 1, 2)
    full.init_model()
    task.init_model()
    for epoch, side in enumerate((20, 27, 32)):
        (a,), (b,) = next(task.epoch_batches(epoch)), next(full.epoch_batches(epoch))
        x, y = task.batch_of(a), full.batch_of(b)
        assert torch.equal(a.idx, b.idx) and x.shape[-2:] == (side, side)
        assert x.is_contiguous(memory_format=torch.channels_last)
        windows = [(a, b) for a in range(33 - side) for b in range(33 - side)
                   if torch.equal(x, y[..., a:a + side, b:b + side])]
        assert len(windows) == 1  # one window of the full-resolution batch, the same for every image
        again = task.batch_of(next(task.epoch_batches(epoch))[0])
        assert torch.equal(again, x)  # keyed by seed, epoch and step: a resumed run sees the same crops
    losses = [task.train_step(*next(task.epoch_batches(e))).total.item() for e in range(3)]
    assert all(0 < v < float("inf") for v in losses)


@pytest.mark.parametrize("norm_every,weight_decay", [(1, 0.0), (3, 0.02)])
def test_muon_renormalises_every_n_steps_and_decays(norm_every, weight_decay):
    from dawnbench_fast.optim.muon import Muon

    gen = torch.Generator().manual_seed(5)
    shapes = [(8, 3, 3, 3), (5, 8, 3, 3)]  # 5 filters: not a multiple of anything
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
    ref = [p.detach().clone() for p in params]
    bufs = [torch.zeros_like(p) for p in ref]
    opt = Muon(params, lr=0.1, momentum=0.6, ns_steps=3, weight_decay=weight_decay, norm_every=norm_every)
    for step in range(1, 8):
        grads = [torch.randn(s, generator=gen) for s in shapes]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        opt.step()
        for k, g in enumerate(grads):  # the definition, written out
            bufs[k] = bufs[k].mul(0.6).add(g)
            nesterov = g.add(bufs[k], alpha=0.6)
            if step % norm_every == 0:
                ref[k] = ref[k] * (len(ref[k]) ** 0.5 / ref[k].norm())
            ref[k] = ref[k].add(newton_schulz(nesterov.reshape(len(g), -1), 3).view(g.shape), alpha=-0.1)
            ref[k] = ref[k] * (1 - 0.1 * weight_decay)
        for p, r in zip(params, ref, strict=True):
            torch.testing.assert_close(p.detach(), r, rtol=1e-5, atol=1e-5)
    assert opt.state_dict()["param_groups"][0]["count"] == 7  # a standalone Muon's count: saved (resume)


def test_recipe_fields_reach_the_net_and_the_hiverge_recipe_trains():
    from support.cifar_data import cifar_dir

    from dawnbench_fast.cifar import RECIPES
    from dawnbench_fast.cifar.train_state import net_of

    cfg = dataclasses.replace(Config(), **RECIPES["hiverge"])
    net = net_of(cfg)
    assert (net.act, net.whiten_act) == ("silu", "gelu")
    momenta = [m.momentum for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(momenta) == 6 and momenta == pytest.approx([1 - 0.5566] * 6)
    published = Config(**RECIPES["airbench94_muon"])
    assert net_of(published).groups[0].norm1.momentum == pytest.approx(0.4)  # airbench's 0.6 keep
    # 1.5 epochs of 3 steps: 5 steps with jitter, SiLU, Muon decay, a 0.19-epoch whitening bias
    small = dataclasses.replace(cfg, subset=384, batch_size=128, widths=(16, 32, 32), epochs=1.5,
                                data_dir=str(cifar_dir()), download=False, kernels="torch",
                                whiten_images=384)
    task = small.build_task(torch.device("cpu"))
    assert (task.total_steps, task.whiten_bias_steps) == (5, 1)
    losses = loss_trajectory(small, 5)
    assert len(losses) == 5 and all(0 < v < 5 for v in losses)
    assert loss_trajectory(small, 2) == losses[:2]  # deterministic for a seed, jitter included


def test_an_evaluation_between_steps_leaves_the_training_unchanged():
    """--eval-every evaluates mid-training: the folded inference net shares the
    whitening conv and the head with the training net, and must not freeze
    them (it once froze the head, so every run evaluated each epoch trained a
    different model from epoch 2 on)."""
    from support.cifar_data import cifar_dir

    cfg = Config(subset=300, eval_subset=100, batch_size=150, epochs=2, whiten_images=100, progressive=(),
                 widths=(16, 32, 32), kernels="torch", precision="fp32", data_dir=str(cifar_dir()),
                 download=False)
    def train(evaluate: bool):
        task = cfg.build_task(torch.device("cpu"))
        task.init_model()
        flags = [p.requires_grad for p in task.model.parameters()]
        losses = []
        for epoch in range(2):
            losses += [task.train_step(*b).total.item() for b in task.epoch_batches(epoch)]
            if evaluate:
                assert 0.0 <= task.evaluate(tta=True).top1 <= 1.0
                assert [p.requires_grad for p in task.model.parameters()] == flags
        return losses, list(task.model.parameters())

    (plain, plain_params), (evaluated, evaluated_params) = train(False), train(True)
    assert len(plain) == 4 and plain == evaluated
    for p, q in zip(plain_params, evaluated_params, strict=True):
        assert torch.equal(p, q)


def _tiny_task(**fields):
    """A tiny task (two steps an epoch), its model built."""
    from support.cifar_data import cifar_dir

    cfg = Config(subset=256, batch_size=128, epochs=1, whiten_images=128, widths=(16, 32, 32),
                 kernels="torch", precision="fp32", data_dir=str(cifar_dir()), download=False, **fields)
    task = cfg.build_task(torch.device("cpu"))
    task.init_model()
    return task


def _two_steps(**fields):
    """A tiny task's model before and after two training steps, and the task."""
    task = _tiny_task(**fields)
    before = {n: p.detach().clone() for n, p in task.model.named_parameters()}
    losses = [task.train_step(*b).total.item() for b in task.epoch_batches(0)]
    assert len(losses) == 2 and all(0 < v < 1e4 for v in losses)
    return task, before, losses


@pytest.mark.parametrize("first_conv", ["whitened", "learned", "random"])
def test_first_conv_switch(first_conv):
    """The whitening lesion: the first conv whitened and frozen (the recipe),
    learned from its seeded init by Muon with the other filters, or that init frozen."""
    task, before, _ = _two_steps(first_conv=first_conv)
    w, w0 = task.model.whiten.weight, before["whiten.weight"]
    seeded = torch.manual_seed(0) and CifarNet(widths=(16, 32, 32)).whiten.weight
    assert torch.equal(w0, seeded) == (first_conv != "whitened")
    assert torch.equal(w, w0) == (first_conv != "learned")
    in_muon = any(p is w for g in task.optimizers[1].param_groups for p in g["params"])
    assert in_muon == w.requires_grad == (first_conv == "learned")
    assert not before["whiten.bias"].any()  # zeroed in every form, then trained for whiten_bias_epochs


def test_filter_optimizer_sgd_puts_the_filters_in_nesterov_sgd():
    from dawnbench_fast.optim.sgd import NesterovSGD

    task, before, losses = _two_steps(filter_optimizer="sgd", lr_filters_sgd=2e-3)
    opt = task.optimizers[1]
    assert type(opt) is NesterovSGD
    assert sum(len(g["params"]) for g in opt.param_groups) == 6
    # the linear decay from lr_filters_sgd, as for every group; plain SGD moves each filter
    assert 0 < task.learning_rates()["filters"] < 2e-3
    moved = [not torch.equal(p, before[n]) for n, p in task.model.named_parameters() if p.ndim == 4]
    assert moved == [False] + [True] * 6  # the frozen whitening conv, then the six filter banks
    assert losses != _two_steps()[2]  # not Muon's trajectory


@pytest.mark.parametrize("channels_last", [True, False])
def test_channels_last_switch_sets_the_layout_of_the_step(channels_last):
    """channels_last=false (the lesion arm) trains in NCHW: the batches too,
    though the augmentation writes channels_last."""
    task = _tiny_task(channels_last=channels_last)
    fmt, other = torch.channels_last, torch.contiguous_format
    if not channels_last:
        fmt, other = other, fmt
    x = task.batch_of(next(task.epoch_batches(0))[0])
    assert x.is_contiguous(memory_format=fmt) and not x.is_contiguous(memory_format=other)
    w = task.model.groups[0].conv1.weight
    assert w.is_contiguous(memory_format=fmt) and not w.is_contiguous(memory_format=other)
