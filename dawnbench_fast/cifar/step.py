"""CIFAR-10's training step, in one room.

- :class:`StepPlan`, resolved once per run from the device and the recipe:
  the precision, kernels and compile mode, whether the step replays CUDA
  graphs (and which variants, or why not), the optimisers' arithmetic, and
  how often the loop reads the device. Every device decision of the step is
  made here; the step itself only reads the plan.
- :class:`TrainState`, everything the step reads or writes, allocated once
  per config before the warm-up and only written after (each seed's reset
  writes into it).
- :func:`train_step`, the step itself: one function over that state and
  the step's keys (:class:`StepKey`). Read it top to
  bottom: the batch made on the device from its keys, forward and loss,
  backward, the gradients summed over the ranks, both optimisers at the
  step's rates, read on the device at the step counter.
- :class:`Stepper`, which runs the step: eagerly on the keys as given, or,
  under a plan with static inputs, on the keys copied into fixed buffers,
  its graph replayed where the variant was captured (cifar.cuda_graph's
  :class:`CudaRecorder`, in the warm-up, off the clock; a self-test, then a
  fall back to the eager body if anything fails).

The step changes form with host structure only: the training side (another
input shape) and whether the whitening bias trains (another autograd graph).
Those two make a :class:`StepVariant`, one graph each. Everything else that
changes from step to step (the images, the epoch, the step's index, the
seed, the learning rates, Muon's renormalisation) is a tensor on the device,
so one graph serves every step of its variant and every seed. On the CPU the
static body runs eagerly on the same buffers, which is how the captured
protocol is tested without a GPU (tests/cifar/test_capture_replay.py,
test_static_step.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

import torch
import torch.nn.functional as F

from dawnbench_fast import dispatch
from dawnbench_fast.cifar import train_state
from dawnbench_fast.cifar.cuda_graph import CudaRecorder, Recorder, Replayable
from dawnbench_fast.cifar.evaluation import inference_net
from dawnbench_fast.cifar.recipe import CifarRecipe
from dawnbench_fast.cifar.train_state import Layout
from dawnbench_fast.data import augment as aug
from dawnbench_fast.data.cifar10_device import DeviceData
from dawnbench_fast.data.progressive import at_side, epoch_side
from dawnbench_fast.data.pruning import EpochPruner
from dawnbench_fast.execution import gpu_defaults
from dawnbench_fast.execution.distributed import allreduce_grads, world
from dawnbench_fast.execution.runtime import autocast, host_read_every, synchronizes
from dawnbench_fast.models.cifar_net import CifarNet, FoldedCifarNet
from dawnbench_fast.newton_schulz import newton_schulz
from dawnbench_fast.optim.muon import Muon
from dawnbench_fast.optim.schedule import linear_decay_table
from dawnbench_fast.optim.updates import at_step
from dawnbench_fast.training.task import Splits
from dawnbench_fast.training.weight_average import TailAverage

# The devices whose optimiser updates take ATen's fused multiply-add with the
# rate as ``alpha`` (optim/updates.py): the CPU, whose trajectories (and
# ten-seed record) it keeps bit for bit. Elsewhere ``alpha`` would be read on
# the host at every call, so the update is a multiply then an add. Tests
# empty it to run the CPU with a captured step's arithmetic.
FMA_DEVICES = ("cpu",)


# -- The plan -------------------------------------------------------------


@dataclass(frozen=True)
class StepVariant:
    """One graph of the step: its input side and whether the whitening bias trains."""

    side: int
    whiten_bias_grad: bool

    def name(self) -> str:
        return f"{self.side}px/{'whiten-bias' if self.whiten_bias_grad else 'frozen'}"


@dataclass(frozen=True)
class StepPlan:
    """How a run's step runs, decided once from the device and the recipe.

    ``variants``: each graph the run replays, with how many steps replay
    it, in the order the run first meets them; ``eager_why``: why the run
    does not replay graphs (empty when it does); ``static``: whether its
    steps still take their inputs through static buffers, run eagerly, as
    ``capture=static`` asks."""

    device: torch.device
    precision: str  # as resolved (config.precision): fp32, bf16, fp16
    backend: str  # the kernels (dispatch.resolve_backend)
    compile_mode: str | None  # torch.compile's mode; None: the step is not compiled
    variants: dict[StepVariant, int] = field(default_factory=dict)
    eager_why: tuple[str, ...] = ()
    static: bool = False
    fma: bool = True  # the updates' fused multiply-add (FMA_DEVICES)
    batch_banks: bool = False  # Muon's banks of one shape in one batched Newton-Schulz
    host_read_every: int = 1  # steps between the loop's reads of device values
    synchronize: bool = False  # the device runs asynchronously: wait for it where a result is read
    splits: bool = False  # time the step's parts on the host (free on the CPU only)

    @property
    def compiled(self) -> bool:
        return self.compile_mode is not None

    @property
    def captured(self) -> bool:
        return not self.eager_why

    @property
    def uses_static_step(self) -> bool:
        """Whether the steps go through the static buffers (captured, or ``static``)."""
        return self.captured or self.static

    def record(self) -> dict:
        """The plan as run.json's ``step`` records it."""
        return {"captured": self.captured, "static_inputs": self.uses_static_step,
                "eager_why": list(self.eager_why),
                "variants": {v.name(): n for v, n in self.variants.items()}}


def plan_step(cfg: Any, device: torch.device, backend: str, epoch_steps: list[int], full_side: int,
              whiten_bias_steps: int, distributed: bool = False) -> StepPlan:
    """The run's plan: ``cfg`` the recipe (precision already resolved),
    ``epoch_steps`` each epoch's steps, ``full_side`` the images' side."""
    compiled = gpu_defaults.compile_enabled(cfg.compile, device)
    mode = gpu_defaults.compile_mode(cfg.compile_mode, device) if compiled else None
    why = eager_reasons(device, cfg.prune, distributed, cfg.capture, mode)
    return StepPlan(
        device=device, precision=cfg.precision, backend=backend, compile_mode=mode,
        variants=step_variants(epoch_steps, cfg.progressive, full_side, whiten_bias_steps),
        eager_why=why, static=cfg.capture == "static" and not blockers(cfg.prune, distributed),
        fma=device.type in FMA_DEVICES,
        # one batched chain of launches for the banks of one shape, on the GPU, where the op
        # is the PyTorch reference (a backend's own kernel is 2-D); the CPU keeps each bank
        # alone (oneDNN's batched bf16 product splits its sums otherwise)
        batch_banks=device.type == "cuda" and dispatch.get_op("newton_schulz", backend) is newton_schulz,
        host_read_every=host_read_every(device), synchronize=synchronizes(device),
        splits=device.type == "cpu")


def step_variants(epoch_steps: list[int], progressive: tuple[int, ...], full_side: int,
                  whiten_bias_steps: int) -> dict[StepVariant, int]:
    """The graphs the run's steps need (``epoch_steps``: each epoch's steps),
    with how many steps replay each, in the order of first use."""
    out: dict[StepVariant, int] = {}
    step = 0
    for epoch, n in enumerate(epoch_steps):
        side = epoch_side(progressive, epoch, full_side)
        for _ in range(n):
            v = StepVariant(side, step < whiten_bias_steps)
            out[v] = out.get(v, 0) + 1
            step += 1
    return out


def blockers(prune: float, distributed: bool) -> tuple[str, ...]:
    """What keeps a run on the eager step whatever is asked, one sentence each."""
    why = []
    if prune:
        why.append("--set prune: the epoch's images are chosen on the host from the last epoch's "
                   "losses, and the step's loss is kept per image")
    if distributed:
        why.append("a torchrun job: the gradients are summed across the ranks between the backward "
                   "and the optimisers, outside any one process's graph")
    return tuple(why)


def eager_reasons(device: torch.device, prune: float, distributed: bool,
                  choice: str = "auto", compile_mode: str | None = None) -> tuple[str, ...]:
    """Why a run on ``device`` with ``capture`` = ``choice`` (and torch.compile
    in ``compile_mode``, None where it does not compile) replays no graph of
    the whole step, one sentence each (none: it replays them)."""
    why = list(blockers(prune, distributed))
    if compile_mode in gpu_defaults.TORCH_GRAPH_MODES:
        why.append(f"--set compile_mode={compile_mode}: torch.compile's own CUDA graphs replay the "
                   "compiled forward and backward instead (the alternative measured against the "
                   "captured step)")
    if choice == "off":
        why.append("--set capture=off: the eager step, as asked")
    elif choice == "static":
        why.append("--set capture=static: the captured step's static inputs, run eagerly without graphs")
    elif device.type != "cuda":
        why.append(f"the step runs on {device.type}: CUDA graphs replay on CUDA devices only")
    return tuple(why)


# -- The step's keys -------------------------------------------------------


class StepKey(NamedTuple):
    """What makes one step's batch: its images (a row of the epoch's order,
    on the device), the epoch, the step's index in it, the seed, and the
    training side. The first four may be tensors on the device (a captured
    step's static inputs, :class:`StaticKeys`); the side is host structure."""

    idx: torch.Tensor
    epoch: int | torch.Tensor
    index: int | torch.Tensor
    seed: int | torch.Tensor
    side: int


# -- The state the step reads ----------------------------------------------


class TrainState:
    """Everything the step reads or writes for one config, allocated once,
    up front, and reset in place for each seed.

    A run of ``--runs N`` trains N seeds of one config after a warm-up on a
    seed of its own (runner/runs.py). Building the net and its optimisers
    afresh for each would rebind every parameter and buffer to new memory,
    which a captured step (CUDA graphs replay fixed addresses) and a
    compiled one (its guards) cannot follow. So the state is allocated when
    the run's first task is made, before the warm-up (the data's padded and
    normalised memory is allocated with the data, data.cifar10_device); the
    tasks of one config share it (cifar.task.shared_tasks), and each seed's
    :meth:`reset` only writes into it. The initial weights are drawn exactly
    as a fresh build draws them (the seed, then the net's constructor on the
    CPU), so a reset run is bit for bit a fresh one
    (tests/cifar/test_train_state.py); the reset is on the clock, as the
    build was.

    It holds: the config it was built for (``cfg``; any seed: the step reads
    the seed from its keys), the ``plan``, the ``data``, the net (on its
    device, in its layout, with its kernels), its optimisers, its tail
    average, the learning-rate table (``lr_table``, float64 [steps + 1,
    groups] on the device; ``lr_host`` its copy for the logs), the step
    counter as a tensor (``step_t``), the augmentation op, the step's forward
    (compiled where the plan says), the folded evaluation net (``folded``),
    and ``stepper``, which runs the step (cifar.step.Stepper). Per seed,
    :meth:`reset` writes the seed's initial state into it; ``pruner`` and
    ``splits`` are the seed's task's."""

    def __init__(self, cfg: CifarRecipe, plan: StepPlan, data: DeviceData, layout: Layout, batch: int):
        """``batch``: the images of this process's share of a step (the static keys' size)."""
        device, backend = plan.device, plan.backend
        self.cfg, self.plan, self.data = cfg, plan, data
        self.built_for = _config_key(cfg, layout)
        self.world = world()
        self.model = train_state.build_model(cfg, device, backend)
        self.optimizers = train_state.build_optimizers(
            self.model, cfg, layout.whiten_bias_steps, backend, layout.total_steps, plan.compiled,
            plan.batch_banks, plan.fma)
        for opt in self.optimizers:
            train_state.allocate_state(opt)
        self.lr_host = linear_decay_table(self.optimizers, layout.total_steps, layout.decay_steps,
                                          layout.lr_floor)
        self.lr_table = self.lr_host.to(device)
        self.step_t = torch.zeros((), dtype=torch.int64, device=device)
        start = max(1, layout.decay_steps - cfg.average_from)
        self.averager = (TailAverage(self.model, start, cfg.average_every, cfg.average_weight)
                         if cfg.average_every else None)
        self.augment = dispatch.get_op("augment", backend)
        forward = forward_loss  # the module's, read at the build: tests replace it
        self.forward_loss = (gpu_defaults.compiled(forward, plan.compile_mode, fullgraph=True)
                             if plan.compiled else forward)
        # the evaluation's net, its BN folded in place each time (cifar.evaluation)
        self.folded: FoldedCifarNet = inference_net(self.model, precision=cfg.precision)
        self.pruner: EpochPruner | None = None
        self.splits = Splits(enabled=False)
        self.stepper = Stepper(self, plan, batch, CudaRecorder() if plan.captured else None)

    def check(self, cfg: CifarRecipe, layout: Layout) -> None:
        """A state is shared only between seeds of one config: its shapes need
        not fit another's (checked once, where a task takes the state)."""
        if _config_key(cfg, layout) != self.built_for:
            raise ValueError("TrainState: this state was built for another config; share a state only "
                             "between seeds of one config")

    def reset(self, cfg: CifarRecipe, pruner: EpochPruner | None = None,
              splits: Splits | None = None) -> None:
        """The seed's initial net (first conv included: whitened from the
        data's ``whiten_x``, as the recipe says), zero optimiser state, no
        average yet and the step counter at 0, all written into the state's
        tensors; ``pruner`` and ``splits``: the seed's task's."""
        torch.manual_seed(cfg.seed)
        # the same draws as a fresh build's, copied into the tensors the step already uses
        self.model.load_state_dict(train_state.net_of(cfg).state_dict())
        self.model.train()  # as built: the warm-up's evaluation left it in eval mode
        self.model.init_first_conv(cfg.first_conv, self.data.whiten_x, eps=cfg.whiten_eps)
        for opt in self.optimizers:
            train_state.zero_state(opt)  # the module's: tests plant a fault there
        self.step_t.zero_()
        if self.averager is not None:
            self.averager.load_state_dict(None)
        self.pruner, self.splits = pruner, splits if splits is not None else Splits(enabled=False)


def _config_key(cfg: CifarRecipe, layout: Layout) -> tuple[str, Layout]:
    return repr(replace(cfg, seed=0)), layout


# -- The step itself -------------------------------------------------------


def forward_loss(model: CifarNet, x: torch.Tensor, y: torch.Tensor, whiten_bias_grad: bool,
                 precision: str, label_smoothing: float, per_example: bool = False) -> torch.Tensor:
    """The step's forward under autocast and its summed label-smoothed loss
    (each example's, for pruning): what ``compile`` compiles (AOTAutograd
    compiles its backward with it). The sum stays ATen's own reduction, so a
    run without pruning computes exactly what it computed before pruning existed."""
    with autocast(precision, x.device):
        out = model(x, whiten_bias_grad=whiten_bias_grad)
    return F.cross_entropy(out.float(), y, label_smoothing=label_smoothing,
                           reduction="none" if per_example else "sum")


def train_step(state: TrainState, key: StepKey, variant: StepVariant) -> torch.Tensor:
    """One training step's device work, what a graph records: returns the
    summed loss, detached. Nothing here reads a device value on the host
    (tests/cifar/test_step_host_reads.py)."""
    cfg, data, model = state.cfg, state.data, state.model
    x = make_batch(state, key, variant.side)
    state.splits.mark("augment")
    # forward and the summed loss (each image's where pruning ranks them), then backward
    pruner = state.pruner
    loss = state.forward_loss(model, x, data.train_labels[key.idx], variant.whiten_bias_grad,
                              cfg.precision, cfg.label_smoothing, pruner is not None)
    if pruner is not None:
        loss = pruner.loss(key.idx, loss)
    state.splits.mark("forward")
    loss.backward()
    allreduce_grads(model.parameters(), state.world)  # summed over the ranks (none in one process)
    state.splits.mark("backward")
    # both optimisers at this step's rates: a row of the table read on the device at the
    # step counter (past the table's end its last row, the decay's floor)
    rates = at_step(state.lr_table, state.step_t.clamp(max=len(state.lr_table) - 1))
    optimizer_step(state.optimizers, rates, state.step_t + 1)
    state.step_t += 1
    # the gradients dropped, so that a capture allocates them inside its pool
    model.zero_grad(set_to_none=True)
    return loss.detach()


def make_batch(state: TrainState, key: StepKey, side: int) -> torch.Tensor:
    """The step's batch: its images augmented on the device, keyed by (seed,
    epoch, image), at ``side`` px; nothing made on the host."""
    cfg, data = state.cfg, state.data
    p = aug.augment_params(key.seed, key.epoch, key.idx, cfg.translate, cfg.flip, cfg.cutout,
                           alternate=cfg.flip_alternating)
    x = state.augment(data.padded, key.idx, p, data.scale, data.shift)
    if cfg.brightness or cfg.contrast:
        x = aug.color_jitter(x, key.seed, key.epoch, key.idx, cfg.brightness, cfg.contrast)
    # a per-image affine jitter and a window commute: the crop after it is the crop before it
    x = at_side(x, side, cfg.progressive_mode, key.seed, key.epoch, key.index)
    if not cfg.channels_last:  # the augmentation writes channels_last; the lesion's step is NCHW
        x = x.contiguous()
    return x


def optimizer_step(optimizers: list[torch.optim.Optimizer], rates: torch.Tensor, step: torch.Tensor) -> None:
    """Every optimiser's step at this step's ``rates`` (one per group, the
    optimisers' groups in order: a row of the learning-rate table) and its
    number ``step`` (1-based, a tensor: Muon's renormalisation reads it)."""
    first = 0
    for opt in optimizers:
        mine = rates[first:first + len(opt.param_groups)]
        opt.step(mine, step) if isinstance(opt, Muon) else opt.step(mine)
        first += len(opt.param_groups)


# -- Running it: eagerly, or replayed -------------------------------------


class StaticKeys:
    """A step's keys in fixed buffers on the device (a captured graph reads
    these addresses): the step's images, the epoch, the step's index and the seed."""

    def __init__(self, batch: int, device: torch.device):
        self.idx = torch.zeros(batch, dtype=torch.int64, device=device)
        self.epoch = torch.zeros((), dtype=torch.int64, device=device)
        self.index = torch.zeros((), dtype=torch.int64, device=device)
        self.seed = torch.zeros((), dtype=torch.int64, device=device)

    def load(self, key: StepKey) -> StepKey:
        """Copy this step's keys into the buffers (device to device, and three
        scalar fills: nothing read back); returns the buffers as the step's key."""
        self.idx.copy_(key.idx)
        self.epoch.fill_(key.epoch)
        self.index.fill_(key.index)
        self.seed.fill_(key.seed)
        return self.key(key.side)

    def key(self, side: int) -> StepKey:
        """The buffers as a step's key at ``side``."""
        return StepKey(self.idx, self.epoch, self.index, self.seed, side)


class CaptureFailed(RuntimeError):
    """A variant's capture or its self-test failed: the run keeps the static
    body, run eagerly, and says why in one line."""


# The self-test's tolerance for a replayed step against the eager body, relative
# to the largest change the eager steps made to each tensor (the loss: to its
# size; a tensor they barely change: to one unit of its last place). A replay
# runs the very kernels the eager body ran, so the two agree bit for bit unless
# an algorithm accumulates in a varying order (cuDNN's and cuBLAS's split
# reductions): a few units of the precision's last place. A capture that froze
# a host value or read a stale tensor is off by the size of a step, orders of
# magnitude more.
SELF_TEST_RTOL = {"fp32": 1e-4, "tf32": 1e-2, "bf16": 2.0 ** -5, "fp16": 2.0 ** -8}


class Schedule(Protocol):
    """What the capture's self-test asks of the run: real keys for a variant's steps."""

    def variant_key(self, variant: StepVariant, index: int) -> StepKey:
        """Step ``index`` of the run's first epoch at the variant's side."""
        ...

    def variant_start(self, variant: StepVariant) -> int:
        """The run's step number at the start of that epoch."""
        ...


class Stepper:
    """Runs the run's step (:func:`train_step`) as its plan says: on the keys
    as given (the eager step), or on :class:`StaticKeys` with, where the plan
    captures, one graph per variant recorded by ``recorder``
    (:class:`CudaRecorder`; tests pass stand-ins that replay without a GPU).

    A variant whose capture or self-test fails drops every graph: the run
    goes on with the static body run eagerly, and ``failed`` (run.json's
    ``step.capture_failed``, the report's step line) says why in one line."""

    def __init__(self, state: TrainState, plan: StepPlan, batch: int, recorder: Recorder | None = None,
                 self_test: bool = True):
        """``batch``: the images of this process's share of a step."""
        self.state, self.plan, self.recorder, self.self_test = state, plan, recorder, self_test
        self.static = StaticKeys(batch, plan.device) if plan.uses_static_step else None
        self.graphs: dict[StepVariant, Replayable] = {}
        self.losses: dict[StepVariant, torch.Tensor] = {}
        self.capture_seconds = 0.0
        self.failed: str | None = None
        self.tested: dict[str, dict] = {}

    def __call__(self, key: StepKey, variant: StepVariant) -> torch.Tensor:
        """One step of ``variant`` on ``key``: eager, or its keys loaded and its
        graph replayed (its body run where it has none). A replayed loss is
        the graph's own tensor: the next replay of the variant overwrites it."""
        if self.static is None:
            return train_step(self.state, key, variant)
        static = self.static.load(key)
        graph = self.graphs.get(variant)
        if graph is None:
            return train_step(self.state, static, variant)
        graph.replay()
        return self.losses[variant]

    def body(self, variant: StepVariant) -> torch.Tensor:
        """What a graph of ``variant`` records: the step on the static keys."""
        return train_step(self.state, self.static.key(variant.side), variant)

    def capture(self, schedule: Schedule) -> None:
        """Record every variant of the plan (the warm-up's task, after its
        eager steps have compiled and autotuned each shape; what the warm-up
        does to its throwaway state does not matter): the model's gradients
        are None between steps, so that the backward allocates them inside
        the pool. Each graph is replayed once, here, so that its first
        replay's upload is not on the clock, then checked against the eager
        body (:meth:`check`). Any failure drops every graph (the run keeps
        the eager static body) and is recorded in ``failed``."""
        if self.recorder is None or self.failed is not None:
            return
        t0 = time.perf_counter()
        variant = None
        try:
            for variant in self.plan.variants:
                if variant in self.graphs:
                    continue
                self.static.load(schedule.variant_key(variant, 0))
                self.state.model.train()
                self.graphs[variant], self.losses[variant] = self.recorder(lambda v=variant: self.body(v))
                self.graphs[variant].replay()
                if self.self_test:
                    got = self.tested[variant.name()] = self.check(schedule, variant)
                    if not got["passed"]:
                        raise CaptureFailed(f"self-test: the replayed step is {got['worst_relative']:.3g} "
                                            f"(relative) from the eager body, beyond {got['rtol']:.3g} for "
                                            f"{self.plan.precision}")
            self._synchronize()
        except Exception as e:  # noqa: BLE001 - any failure of a capture falls back, said in one line
            where = f"{variant.name()}: " if variant is not None else ""
            self.failed = where + one_line(e)
            self.graphs.clear()
            self.losses.clear()
            self._synchronize(quiet=True)
        self.capture_seconds += time.perf_counter() - t0

    def check(self, schedule: Schedule, variant: StepVariant) -> dict:
        """The self-test: from one saved state, two steps of ``variant`` (the
        second with other keys and the step counter moved on, so that a
        value frozen at the capture shows) replayed, then the same two run
        eagerly from the same state; the losses and every tensor the step
        changes compared within :data:`SELF_TEST_RTOL` of the precision
        (``passed``; :meth:`capture` fails the capture beyond it). The
        warm-up's state is throwaway: it is left as the eager steps leave it."""
        state = mutable_tensors(self.state)
        saved = [t.detach().clone() for t in state]
        # the step counter at the variant's first step of a run, not the warm-up's (which may
        # have run past the rate table's end, where a rate frozen at the capture looks right)
        start = schedule.variant_start(variant)

        def two_steps(step: Callable[[], torch.Tensor]) -> list[torch.Tensor]:
            with torch.no_grad():
                for t, s in zip(state, saved, strict=True):
                    t.copy_(s)
                self.state.step_t.fill_(start)
            losses = []
            for index in (0, 1):
                self.static.load(schedule.variant_key(variant, index))
                losses.append(step().clone())
            return [torch.stack(losses), *(t.detach().clone() for t in state)]

        replayed = two_steps(lambda: (self.graphs[variant].replay(), self.losses[variant])[1])
        eager = two_steps(lambda: self.body(variant))
        rtol = SELF_TEST_RTOL.get(self.plan.precision, SELF_TEST_RTOL["bf16"])
        worst, bitwise = 0.0, True
        for got, want, before in zip(replayed, eager, [None, *saved], strict=True):
            if torch.equal(got, want):
                continue
            bitwise = False
            # a tensor the steps barely change (or not at all) is measured against its own
            # rounding instead: one unit of its dtype's last place at its largest value
            ulp = torch.finfo(want.dtype).eps if want.is_floating_point() else 1.0
            got, want = got.double(), want.double()
            change = (want - before.double()).abs().max() if before is not None else want.abs().max()
            scale = torch.maximum(change, ulp * want.abs().max())
            err = ((got - want).abs().max() / scale.clamp_min(1e-30)).item()  # off the clock: the warm-up
            worst = max(worst, err) if err == err else float("inf")  # NaN: as far off as can be
        return {"passed": worst <= rtol, "bitwise": bitwise, "worst_relative": worst, "rtol": rtol}

    def record(self) -> dict:
        """run.json's ``step``: the plan, and what was captured and how long it
        took; a failed capture: not captured, and why (``capture_failed``)."""
        rec = self.plan.record()
        if self.static is None:
            return rec
        rec.update(graphs=[v.name() for v in self.graphs], capture_seconds=round(self.capture_seconds, 3),
                   capture_failed=self.failed, self_test=self.tested or None)
        if self.failed is not None:
            rec.update(captured=False, eager_why=[f"capture failed: {self.failed}"])
        return rec

    def _synchronize(self, quiet: bool = False) -> None:
        if not self.plan.synchronize:
            return
        try:
            torch.cuda.synchronize(self.plan.device)
        except RuntimeError:
            if not quiet:
                raise


def captured_plan(plan: StepPlan) -> StepPlan:
    """``plan`` as a GPU's: every variant captured (tests record it with a stand-in on the CPU)."""
    return replace(plan, eager_why=(), static=False, synchronize=False)


def mutable_tensors(state: TrainState) -> list[torch.Tensor]:
    """Every tensor a step writes: the net's parameters and buffers (BN's
    statistics), the optimisers' state and the step counter."""
    out = [*state.model.parameters(), *state.model.buffers()]
    for opt in state.optimizers:
        out += [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    return out + [state.step_t]


def one_line(e: BaseException) -> str:
    """An exception as one line: its type and the first line of its message, shortened."""
    first = (str(e).strip().splitlines() or [""])[0]
    line = f"{type(e).__name__}: {first}" if not isinstance(e, CaptureFailed) else first
    return line if len(line) <= 240 else line[:237] + "..."


def first_epoch_at(warm_up_epochs: tuple[int, ...], progressive: tuple[int, ...], full_side: int,
                   side: int) -> int:
    """The first epoch of the run whose training side is ``side``: the one of
    the run's ``warm_up_epochs`` (the first epoch of each side) at that side."""
    return next(e for e in warm_up_epochs if epoch_side(progressive, e, full_side) == side)
