"""CIFAR-10's net and optimisers as a recipe describes them (:func:`net_of`,
:func:`build_model`, :func:`build_optimizers`), and :class:`TrainState`: the
net, optimisers and end-of-run weight average of one config, built once per
process and reset in place for each seed.

A run of ``--runs N`` trains N seeds of one config after a warm-up on a seed
of its own (runner/runs.py). Building the net and its optimisers afresh for
each rebinds every parameter and buffer to new memory, which a captured step
(CUDA graphs replay fixed addresses) and a compiled one (its guards) cannot
follow. So the tasks of one config can share a :class:`TrainState`: the
first ``reset`` builds it, each later one writes the seed's initial state
into the same tensors; the command (cifar.cli's ``recipe``) shares one
between its warm-up and its seeds. The initial weights are drawn exactly as a fresh build draws
them (the seed, then the net's constructor on the CPU), so a reset run is bit
for bit a fresh one (tests/cifar/test_train_state.py); the reset is on the
clock, as the build was.
"""

from __future__ import annotations

import dataclasses

import torch

from dawnbench_fast import dispatch
from dawnbench_fast.cifar.recipe import CifarRecipe
from dawnbench_fast.cifar.static_step import StepGraphs
from dawnbench_fast.execution import gpu_defaults
from dawnbench_fast.models.cifar_net import CifarNet, FoldedCifarNet
from dawnbench_fast.newton_schulz import newton_schulz, newton_schulz_batched
from dawnbench_fast.optim.muon import Muon
from dawnbench_fast.optim.schedule import linear_decay_table
from dawnbench_fast.optim.sgd import NesterovSGD
from dawnbench_fast.optim.updates import at_step
from dawnbench_fast.training.weight_average import TailAverage


def net_of(cfg: CifarRecipe) -> CifarNet:
    """The net ``cfg`` describes, on the CPU, in PyTorch's default layout."""
    model = CifarNet(widths=tuple(cfg.widths), whiten_kernel=cfg.whiten_kernel, act=cfg.act,
                     whiten_act=cfg.whiten_act)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = 1.0 - cfg.bn_momentum  # PyTorch's momentum weighs the new statistic
    return model


def build_model(cfg: CifarRecipe, device: torch.device, backend: str) -> CifarNet:
    """``net_of(cfg)`` on ``device``, in the recipe's layout, with ``backend``'s kernels."""
    model = net_of(cfg).to(device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model.set_kernels(backend)


def build_optimizers(model: CifarNet, cfg: CifarRecipe, whiten_bias_steps: int = 0,
                     backend: str = "torch", total_steps: int = 1,
                     compiled: bool = False) -> list[torch.optim.Optimizer]:
    """[Nesterov SGD on biases and head, the filters' optimiser]: Muon on the
    conv filters (a learned first conv's too), or with ``filter_optimizer``
    "sgd" a Nesterov SGD like the other (the lesion of Muon). The whitening
    bias's lr reaches 0 when it freezes (after ``whiten_bias_steps``); Muon's
    renormalisation period grows over the run's ``total_steps`` with
    ``filter_norm_ramp``; ``compiled``: Muon's batched Newton-Schulz is
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
    sgd = NesterovSGD(groups, momentum=cfg.sgd_momentum)
    if cfg.filter_optimizer == "sgd":
        lr = cfg.lr_filters_sgd
        return [sgd, NesterovSGD(filters, lr=lr, momentum=cfg.sgd_momentum, weight_decay=wd / lr)]
    orthogonalize = dispatch.get_op("newton_schulz", backend)
    # the banks of one shape in one batched chain where that saves launches: on
    # the GPU, when the op is the PyTorch reference (not a backend's own 2-D kernel)
    batch_banks = filters[0].device.type == "cuda" and orthogonalize is newton_schulz
    batch = newton_schulz_batched
    if compiled and batch_banks:  # compiled only where it runs
        batch = gpu_defaults.compiled(batch, fullgraph=True)
    return [sgd, Muon(filters, lr=cfg.lr_filters, momentum=cfg.muon_momentum, ns_steps=cfg.ns_steps,
                      orthogonalize=orthogonalize, weight_decay=cfg.muon_weight_decay * cfg.batch_size,
                      norm_every=cfg.filter_norm_every, norm_ramp=cfg.filter_norm_ramp,
                      total_steps=total_steps, batch_banks=batch_banks, orthogonalize_batch=batch)]


def optimizer_step(optimizers: list[torch.optim.Optimizer], rates: torch.Tensor, step: torch.Tensor) -> None:
    """Every optimiser's step at this step's ``rates`` (one per group, the
    optimisers' groups in order: a row of the learning-rate table) and its
    number ``step`` (1-based, a tensor: Muon's renormalisation reads it)."""
    first = 0
    for opt in optimizers:
        mine = rates[first:first + len(opt.param_groups)]
        opt.step(mine, step) if isinstance(opt, Muon) else opt.step(mine)
        first += len(opt.param_groups)



@dataclasses.dataclass(frozen=True)
class Layout:
    """What the state's shapes and schedules follow beside the config: the
    task's step counts (the same for every seed of a config)."""

    total_steps: int
    decay_steps: int
    whiten_bias_steps: int
    lr_floor: float = 0.0


class TrainState:
    """A recipe's net (on its device, in its layout, with its kernels), its
    optimisers, its tail average, the learning-rate table (``lr_table``,
    float64 [steps + 1, groups] on the device; ``lr_host`` its copy for the
    logs) and the step counter as a tensor (``step_t``). :meth:`reset` makes
    it the state a fresh build for ``cfg.seed`` would be."""

    def __init__(self) -> None:
        self.model: torch.nn.Module | None = None
        self.optimizers: list[torch.optim.Optimizer] = []
        self.averager: TailAverage | None = None
        self.lr_host: torch.Tensor | None = None
        self.lr_table: torch.Tensor | None = None
        self.step_t: torch.Tensor | None = None
        self.built_for: tuple[str, Layout] | None = None
        # the step's static inputs and graphs (cifar.static_step), made by the first task that
        # needs them: they read this state's tensors, which every reset keeps in place
        self.graphs: StepGraphs | None = None
        # the evaluation's net, its BN folded in place each time (cifar.evaluation)
        self.folded: FoldedCifarNet | None = None

    def rates(self) -> torch.Tensor:
        """This step's learning rates, a row of the table read on the device at
        ``step_t`` (past the table's end its last row: the decay's floor)."""
        return at_step(self.lr_table, self.step_t.clamp(max=len(self.lr_table) - 1))

    def step_optimizers(self) -> None:
        """Every optimiser's step at this step's rates; ``step_t`` counts it."""
        optimizer_step(self.optimizers, self.rates(), self.step_t + 1)
        self.step_t += 1

    def reset(self, cfg: CifarRecipe, layout: Layout, device: torch.device, backend: str,
              whiten_x: torch.Tensor) -> None:
        """The seed's initial net (first conv included: whitened from
        ``whiten_x``, as the recipe says), zero optimiser state and no
        average yet; built on first use, in place after that. A state shared
        by tasks of different configs is refused: its shapes need not fit."""
        key = (repr(dataclasses.replace(cfg, seed=0)), layout)
        if self.built_for is not None and self.built_for != key:
            raise ValueError("TrainState.reset: this state was built for another config; share a state "
                             "only between seeds of one config")
        torch.manual_seed(cfg.seed)
        if self.model is None:
            self.model = build_model(cfg, device, backend)
        else:
            # the same draws as a fresh build's, copied into the tensors the step already uses
            self.model.load_state_dict(net_of(cfg).state_dict())
            self.model.train()  # as built: the warm-up's evaluation left it in eval mode
        self.model.init_first_conv(cfg.first_conv, whiten_x, eps=cfg.whiten_eps)
        if self.built_for is None:
            self.optimizers = build_optimizers(self.model, cfg, layout.whiten_bias_steps, backend,
                                               layout.total_steps,
                                               gpu_defaults.compile_enabled(cfg.compile, device))
            self.lr_host = linear_decay_table(self.optimizers, layout.total_steps, layout.decay_steps,
                                              layout.lr_floor)
            self.lr_table = self.lr_host.to(device)
            self.step_t = torch.zeros((), dtype=torch.int64, device=device)
            start = max(1, layout.decay_steps - cfg.average_from)
            self.averager = (TailAverage(self.model, start, cfg.average_every, cfg.average_weight)
                             if cfg.average_every else None)
            self.built_for = key
            return
        for opt in self.optimizers:
            zero_state(opt)
        self.step_t.zero_()
        if self.averager is not None:
            self.averager.load_state_dict(None)


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
    for p, state in opt.state.items():
        old = kept.get(id(p), {})
        for name, value in state.items():
            if torch.is_tensor(value) and torch.is_tensor(old.get(name)) and old[name].shape == value.shape:
                state[name] = old[name].copy_(value)
