"""The optimisers' step on tensors (optim/updates.py, optim/sgd.py,
optim/muon.py): on the CPU bit for bit the step it replaced (torch.optim.SGD
and Muon's per-bank loop with Python-float rates, tests/support/
optim_reference.py) at the rates of the learning-rate table; the GPU's
formulation (a multiply then an add, the banks of one shape batched) within
rounding of it and traced whole by ``torch.compile(fullgraph=True)``."""

from __future__ import annotations

import pytest
import torch
from support.optim_reference import LoopMuon

from dawnbench_fast.newton_schulz import newton_schulz, newton_schulz_batched
from dawnbench_fast.optim.muon import Muon, muon_update, renorm_steps
from dawnbench_fast.optim.schedule import linear_decay, linear_decay_table
from dawnbench_fast.optim.sgd import NesterovSGD
from dawnbench_fast.optim.updates import sgd_update

# conv banks as the CIFAR net has them, three of one shape, and odd sizes
BANKS = [(16, 3, 3, 3), (24, 16, 3, 3), (24, 24, 3, 3), (24, 24, 3, 3), (24, 24, 3, 3), (7, 24, 3, 3)]
VECTORS = [(24,), (37,), (10, 24)]


def _params(shapes, gen):
    return [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]


def _grads(params, gen):
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)


def test_nesterov_sgd_is_torch_sgd_bit_for_bit_at_the_table_s_rates():
    gen = torch.Generator().manual_seed(0)
    ours = _params(VECTORS, gen)
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    def groups(ps):
        return [dict(params=[ps[0]], lr=0.3, weight_decay=0.01, decay_steps=3),
                dict(params=ps[1:], lr=0.07, weight_decay=0.0)]
    new, old = NesterovSGD(groups(ours), momentum=0.85), torch.optim.SGD(groups(theirs), momentum=0.85,
                                                                          nesterov=True)
    table = linear_decay_table([new], 8, 6, floor=0.05)
    for step in range(8):
        _grads(ours, gen)
        for p, q in zip(ours, theirs, strict=True):
            q.grad = p.grad.clone()
        for g in old.param_groups:  # set_linear_decay as it was: Python floats written into the groups
            g.setdefault("initial_lr", g["lr"])
            own = g.get("decay_steps")
            g["lr"] = g["initial_lr"] * (linear_decay(step, own) if own else linear_decay(step, 6, 0.05))
        new.step(table[step])
        old.step()
        for p, q in zip(ours, theirs, strict=True):
            assert torch.equal(p, q), step
    assert table[7, 0] == 0.0 and table[7, 1] == 0.07 * 0.05


@pytest.mark.parametrize("norm_every,norm_ramp,weight_decay", [(1, 0, 0.0), (2, 5, 0.0), (3, 0, 0.02)])
def test_muon_on_tensors_is_the_per_bank_loop_bit_for_bit(norm_every, norm_ramp, weight_decay):
    gen = torch.Generator().manual_seed(1)
    ours = _params(BANKS, gen)
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    kw = dict(lr=0.2, momentum=0.6, ns_steps=3, weight_decay=weight_decay, norm_every=norm_every,
              norm_ramp=norm_ramp, total_steps=9)
    new, old = Muon(ours, **kw), LoopMuon(theirs, **kw)
    table = linear_decay_table([new], 9, 9)
    step_t = torch.zeros((), dtype=torch.int64)
    for step in range(9):
        _grads(ours, gen)
        for p, q in zip(ours, theirs, strict=True):
            q.grad = p.grad.clone()
        old.param_groups[0]["lr"] = 0.2 * linear_decay(step, 9)
        new.step(table[step], step_t + 1)
        step_t += 1
        old.step()
        for k, (p, q) in enumerate(zip(ours, theirs, strict=True)):
            assert torch.equal(p, q), (step, k)


@torch.no_grad()
def test_the_gpu_formulation_stays_within_rounding_of_the_loop_and_compiles_whole():
    """The CUDA path, run here: a multiply then an add, the banks of one
    shape in one batched chain, every piece traced as one graph, over five
    steps with decay and renormalisation, against the per-bank loop
    (tests/support/optim_reference.py) and torch.optim.SGD."""
    steps, lr, wd = 5, 0.2, 0.5
    gen = torch.Generator().manual_seed(2)
    params = [p.detach() for p in _params(BANKS, gen)]
    ref = [torch.nn.Parameter(p.clone()) for p in params]
    loop = LoopMuon(ref, lr=lr, momentum=0.6, ns_steps=3, weight_decay=wd, norm_every=2, total_steps=steps)
    group = dict(momentum=0.6, nesterov=True, ns_steps=3, weight_decay=wd)
    orthogonalize = Muon([torch.nn.Parameter(torch.zeros(1))], batch_banks=True)._orthogonalize
    due = renorm_steps(steps, steps, 2, 0)

    def gpu_step(ps, gs, bufs, lr, renorm):
        muon_update(ps, gs, bufs, lr, renorm, group, orthogonalize, fma=False)

    compiled = torch.compile(gpu_step, fullgraph=True, backend="aot_eager")
    bufs = [torch.zeros_like(p) for p in params]
    for k in range(steps):
        grads = [torch.randn(p.shape, generator=gen) for p in params]
        rate = lr * linear_decay(k, steps)
        compiled(params, grads, bufs, torch.tensor(rate, dtype=torch.float64), torch.tensor(due[k + 1]))
        for q, g in zip(ref, grads, strict=True):
            q.grad = g.clone()
        loop.param_groups[0]["lr"] = rate
        loop.step()
        for i, (a, b) in enumerate(zip(params, ref, strict=True)):
            # at most the last bf16 bit of each step's update (|u| < 1) at the rate, summed over
            # the steps; the decay applied before the update (lr^2 wd u apart) or a squared rate is not
            torch.testing.assert_close(a, b.detach(), rtol=0, atol=steps * lr * 2 ** -8,
                                       msg=lambda m, k=k, i=i: f"step {k} bank {i}: {m}")

    sgd_params = [p.detach() for p in _params(VECTORS, gen)]
    theirs = [torch.nn.Parameter(p.clone()) for p in sgd_params]
    torch_sgd = torch.optim.SGD(theirs, lr=lr, momentum=0.85, nesterov=True, weight_decay=wd)
    sgd = torch.compile(sgd_update, fullgraph=True, backend="aot_eager")
    sgd_bufs = [torch.zeros_like(p) for p in sgd_params]
    for k in range(steps):
        grads = [torch.randn(p.shape, generator=gen) for p in sgd_params]
        rate = lr * linear_decay(k, steps)
        sgd(sgd_params, grads, sgd_bufs, torch.tensor(-rate, dtype=torch.float64), 0.85, wd, fma=False)
        for q, g in zip(theirs, grads, strict=True):
            q.grad = g.clone()
        torch_sgd.param_groups[0]["lr"] = rate
        torch_sgd.step()
        for a, b in zip(sgd_params, theirs, strict=True):
            # float32 roundings only: the unfused multiply-add against torch's fused one
            torch.testing.assert_close(a, b.detach(), rtol=1e-6, atol=1e-6,
                                       msg=lambda m, k=k: f"sgd step {k}: {m}")


@pytest.mark.parametrize("shape", [(3, 24, 216), (2, 37, 11), (4, 64, 576)])
def test_batched_newton_schulz_is_each_matrix_s(shape):
    g = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    out = newton_schulz_batched(g)
    # every element computed (no NaN: the true result has none), then each within a bf16 bit of the 2-D op's
    assert out.dtype == torch.bfloat16 and out.shape == shape and not out.isnan().any()
    want = torch.stack([newton_schulz(m) for m in g])
    torch.testing.assert_close(out.float(), want.float(), rtol=0, atol=2 ** -7)


def test_renormalisation_is_read_at_the_step_tensor():
    p = torch.nn.Parameter(torch.randn(5, 4, 3, 3, generator=torch.Generator().manual_seed(4)))
    opt = Muon([p], lr=1e-6, norm_every=2, total_steps=6)
    for step, due in ((1, False), (2, True)):
        with torch.no_grad():
            p.mul_(10.0 / p.norm())
        p.grad = torch.randn(p.shape)
        opt.step(torch.tensor([1e-6], dtype=torch.float64), torch.tensor(step))
        assert abs(p.norm().item() - (5 ** 0.5 if due else 10.0)) < 1e-3


def test_the_task_s_step_is_the_python_float_step_bit_for_bit(monkeypatch):
    """A few steps of the CIFAR task (the default's levers: the floor and its
    hold, the renormalisation ramp, the whitening bias's own decay, the
    average) against the same task stepping torch.optim.SGD and the per-bank
    Muon at Python-float rates, as the step did before its learning rates became tensors."""
    from support.cifar_data import cifar_dir

    from dawnbench_fast.cifar import CifarTask, Config
    from dawnbench_fast.cifar import step as cifar_step

    # narrow groups: the update's arithmetic does not depend on the widths (each group still has
    # its filters in Muon's banks and its norms and biases in SGD's)
    cfg = Config(subset=600, eval_subset=100, batch_size=100, epochs=2, whiten_images=100, average_from=4,
                 widths=(16, 32, 48), precision="fp32", kernels="torch", data_dir=str(cifar_dir()),
                 download=False)
    base = cfg.build_task(torch.device("cpu"))

    def run(reference: bool) -> dict[str, torch.Tensor]:
        task = CifarTask(cfg, base.data, base.device, base.backend)
        task.init_model()
        if reference:
            sgd_new, muon_new = task.optimizers
            groups = [{k: g[k] for k in ("params", "lr", "weight_decay")} for g in sgd_new.param_groups]
            sgd = torch.optim.SGD(groups, momentum=cfg.sgd_momentum, nesterov=True)
            g = muon_new.param_groups[0]
            muon = LoopMuon(g["params"], **{k: g[k] for k in ("lr", "momentum", "ns_steps", "weight_decay",
                                                               "norm_every", "norm_ramp", "total_steps")})
            own = [gr.get("decay_steps") for gr in sgd_new.param_groups]

            def old_step() -> None:
                for opt, owns in ((sgd, own), (muon, [None])):
                    for group, mine in zip(opt.param_groups, owns, strict=True):
                        group.setdefault("initial_lr", group["lr"])
                        group["lr"] = group["initial_lr"] * (
                            linear_decay(task.step, mine) if mine else
                            linear_decay(task.step, task.decay_steps, cfg.lr_floor))
                    opt.step()
            monkeypatch.setattr(cifar_step, "optimizer_step", lambda optimizers, rates, step: old_step())
        for batch in [b for epoch in range(2) for b in task.epoch_batches(epoch)]:
            task.train_step(*batch)
        assert task.step == 12
        monkeypatch.undo()
        return {**task.model.state_dict(), **{f"avg{i}": a for i, a in enumerate(task.averager.state_dict())}}

    new, old = run(False), run(True)
    assert new.keys() == old.keys()
    for name, want in old.items():
        assert torch.equal(new[name], want), name
