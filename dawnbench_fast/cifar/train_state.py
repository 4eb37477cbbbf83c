"""The pieces of CIFAR-10's training state: the net and optimisers as a
recipe describes them (:func:`net_of`, :func:`build_model`,
:func:`build_optimizers`), their state allocated before the first step
(:func:`allocate_state`), zeroed for a new seed (:func:`zero_state`) and
loaded from a checkpoint (:func:`load_state_in_place`), all in place. The
state they make up, allocated once per config and reset for each seed, is
cifar.step's :class:`~dawnbench_fast.cifar.step.TrainState`.
"""

from __future__ import annotations

import dataclasses

import torch

from dawnbench_fast import dispatch
from dawnbench_fast.cifar.recipe import CifarRecipe
from dawnbench_fast.execution import gpu_defaults
from dawnbench_fast.models.cifar_net import CifarNet
from dawnbench_fast.newton_schulz import newton_schulz_batched
from dawnbench_fast.optim.muon import Muon
from dawnbench_fast.optim.sgd import NesterovSGD


def net_of(cfg: CifarRecipe) -> CifarNet:
    """The net ``cfg`` describes, on the CPU, in PyTorch's default layout."""
    model = CifarNet(widths=tuple(cfg.widths), whiten_kernel=cfg.whiten_kernel, act=cfg.act,
                     whiten_act=cfg.whiten_act)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = 1.0 - cfg.bn_momentum  # PyTorch's momentum weighs the new statistic
    return model


def build_model(cfg: CifarRecipe, device: torch.device, backend: str) -> CifarNet:
    """``net_of(cfg)`` on ``device``, in the recipe's layout, with ``backend``'s
    kernels, its first conv trainable where ``cfg.first_conv`` learns it (so
    that the filters' optimiser, built next, takes it; each seed's
    ``init_first_conv`` sets its values)."""
    model = net_of(cfg).to(device)
    model.whiten.weight.requires_grad_(cfg.first_conv == "learned")
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model.set_kernels(backend)


def build_optimizers(model: CifarNet, cfg: CifarRecipe, whiten_bias_steps: int = 0,
                     backend: str = "torch", total_steps: int = 1, compiled: bool = False,
                     batch_banks: bool = False, fma: bool = True) -> list[torch.optim.Optimizer]:
    """[Nesterov SGD on biases and head, the filters' optimiser]: Muon on the
    conv filters (a learned first conv's too), or with ``filter_optimizer``
    "sgd" a Nesterov SGD like the other (the lesion of Muon). The whitening
    bias's lr reaches 0 when it freezes (after ``whiten_bias_steps``); Muon's
    renormalisation period grows over the run's ``total_steps`` with
    ``filter_norm_ramp``. ``batch_banks``, ``fma``: the step's plan
    (cifar.step.StepPlan); ``compiled``: Muon's batched Newton-Schulz is
    compiled (where the step's forward is)."""
    filters = [p for p in model.parameters() if p.ndim == 4 and p.requires_grad]
    norm_biases = [
        p for n, p in model.named_parameters() if ".norm" in n and p.requires_grad
    ]
    wd = cfg.weight_decay * cfg.batch_size
    groups = [
        dict(params=[model.whiten.bias], lr=cfg.lr_bias, weight_decay=wd / cfg.lr_bias,
             decay_steps=whiten_bias_steps),
        dict(params=norm_biases, lr=cfg.lr_bias, weight_decay=wd / cfg.lr_bias),
        dict(params=[model.head.weight], lr=cfg.lr_head, weight_decay=wd / cfg.lr_head),
    ]
    sgd = NesterovSGD(groups, momentum=cfg.sgd_momentum, fma=fma)
    if cfg.filter_optimizer == "sgd":
        lr = cfg.lr_filters_sgd
        return [sgd, NesterovSGD(filters, lr=lr, momentum=cfg.sgd_momentum, weight_decay=wd / lr, fma=fma)]
    batch = newton_schulz_batched
    if compiled and batch_banks:  # compiled only where it runs
        batch = gpu_defaults.compiled(batch, fullgraph=True)
    return [sgd, Muon(filters, lr=cfg.lr_filters, momentum=cfg.muon_momentum, ns_steps=cfg.ns_steps,
                      orthogonalize=dispatch.get_op("newton_schulz", backend),
                      weight_decay=cfg.muon_weight_decay * cfg.batch_size,
                      norm_every=cfg.filter_norm_every, norm_ramp=cfg.filter_norm_ramp,
                      total_steps=total_steps, batch_banks=batch_banks, orthogonalize_batch=batch, fma=fma)]


@torch.no_grad()
def allocate_state(opt: torch.optim.Optimizer) -> None:
    """``opt``'s state made before its first step: a momentum buffer of zeros
    per parameter (which takes the first gradient as it is, as a buffer made
    at the first step does) and, for Muon, each group's renormalisation table."""
    for group in opt.param_groups:
        for p in group["params"]:
            opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
    if isinstance(opt, Muon):
        for i, group in enumerate(opt.param_groups):
            opt.renorm_table(i, group["params"][0].device)


@dataclasses.dataclass(frozen=True)
class Layout:
    """What the state's shapes and schedules follow beside the config: the
    task's step counts (the same for every seed of a config)."""

    total_steps: int
    decay_steps: int
    whiten_bias_steps: int
    lr_floor: float = 0.0


@torch.no_grad()
def zero_state(opt: torch.optim.Optimizer) -> None:
    """``opt`` as before its first step, its buffers kept: tensors zeroed in
    place (a momentum buffer of zeros takes the first gradient as it is, as a
    new one does), counters dropped (they restart as in a new optimiser)."""
    for state in opt.state.values():
        for name in list(state):
            if torch.is_tensor(state[name]):
                state[name].zero_()
            else:
                del state[name]


@torch.no_grad()
def load_state_in_place(opt: torch.optim.Optimizer, saved: dict) -> None:
    """``opt.load_state_dict(saved)`` with every state tensor that ``opt``
    already holds kept where it is, the saved values copied into it: PyTorch's
    load puts new tensors in the state, and a captured step (CUDA graphs
    replay fixed addresses) would go on reading the old ones."""
    kept = {id(p): dict(state) for p, state in opt.state.items()}
    opt.load_state_dict(saved)
    for group in opt.param_groups:
        for p in group["params"]:
            state, old = opt.state[p], kept.get(id(p), {})
            for name, value in old.items():
                if not torch.is_tensor(value):
                    continue
                new = state.get(name)
                if new is None:  # not saved: the parameter had not stepped, its buffer still zeros
                    state[name] = value.zero_()
                elif torch.is_tensor(new) and new.shape == value.shape:
                    state[name] = value.copy_(new)
