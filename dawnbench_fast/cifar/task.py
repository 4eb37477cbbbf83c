"""CIFAR-10's task: the recipe as the loop runs it (:class:`Config`) and
:class:`CifarTask`, the training run that dawnbench_fast.training.train's
loop drives (the epoch's step keys, the step, evaluation, predictor,
checkpoint state). The step itself and its plan are in
dawnbench_fast.cifar.step, with everything it reads, allocated once per
config (its TrainState).

Every hyperparameter is a field of the recipe (dawnbench_fast.cifar.recipe);
the evaluation (BN folded, test-time augmentation) is in
dawnbench_fast.cifar.evaluation and dawnbench_fast.cifar.tta; the command
line in dawnbench_fast.cifar.cli.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.cifar import evaluation as cifar_eval
from dawnbench_fast.cifar.evaluation import evaluate, inference_net
from dawnbench_fast.cifar.recipe import CifarRecipe, validate
from dawnbench_fast.cifar.step import StepKey, StepVariant, TrainState, first_epoch_at, make_batch, plan_step
from dawnbench_fast.cifar.train_state import Layout, load_state_in_place, net_of
from dawnbench_fast.cifar.tta import selective_tta_logits
from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.config.precision import with_resolved_precision
from dawnbench_fast.csrc import conv_group, engine
from dawnbench_fast.data.cifar10 import load_cifar10
from dawnbench_fast.data.cifar10_device import DeviceData, place_data
from dawnbench_fast.data.host_copy import to_device
from dawnbench_fast.data.progressive import epoch_side, first_epoch_of_each_side
from dawnbench_fast.data.pruning import EpochPruner
from dawnbench_fast.execution.distributed import average_bn_statistics, world
from dawnbench_fast.execution.runtime import autocast
from dawnbench_fast.models.cifar_net import CifarNet, FoldedCifarNet
from dawnbench_fast.training import checkpoint
from dawnbench_fast.training.task import (
    Deployed,
    Evaluation,
    Splits,
    StepLoss,
    epoch_steps,
    loop_epochs,
    steps_in,
)


@dataclass
class Config(CifarRecipe):
    """The recipe (every field: :class:`~dawnbench_fast.cifar.recipe.CifarRecipe`)
    as the training loop runs it."""

    def build_task(self, device: torch.device) -> CifarTask:
        """Validate, resolve the kernels, load and place the data, and return
        the task (train.loss_trajectory runs any recipe through this)."""
        cfg, _ = with_resolved_precision(validate(self), device)
        backend = dispatch.resolve_backend(cfg.kernels, device)
        data = place_data(load_cifar10(cfg.data_dir, cfg.download), cfg, device)
        return CifarTask(cfg, data, device, backend)


# -- The training task ---------------------------------------------------


class CifarTask:
    """One training run of the recipe: its state and its step. It is the
    :class:`dawnbench_fast.training.task.Task` that the loop drives. In a torchrun job
    each rank trains on its share of every global batch, its gradients summed
    over the ranks before the step, its BN statistics its own
    (dawnbench_fast.execution.distributed)."""

    def __init__(self, cfg: Config, data: DeviceData, device: torch.device, backend: str,
                 state: TrainState | None = None):
        """``state``: everything the step reads, which the tasks of one
        config's seeds (and its warm-up) share so that it is allocated once
        (cifar.step.TrainState, :func:`shared_tasks`); allocated here, for this
        task alone, by default."""
        self.cfg, self.data, self.device, self.backend = cfg, data, device, backend
        self.n_train = len(data.train_labels)
        self.batch = cfg.batch_within(self.n_train)  # refused, not cut, when larger than the set
        self.world = world()
        self.share = self.world.batch_share(self.batch)  # this rank's slice of each global batch
        if cfg.prune and self.world.distributed:
            raise ConfigError("--set prune: not in a torchrun job yet (each rank would rank only its "
                              "own images' losses); run it in one process")
        self.steps_per_epoch = max(1, self.n_train // self.batch)  # a whole, unpruned epoch
        self.pruner = EpochPruner(self.n_train, cfg.prune, cfg.prune_until, cfg.epochs, cfg.seed,
                                  device) if cfg.prune else None
        # as many steps as whole batches of the images the epoch visits (epoch_batches)
        def whole(e: int) -> int:
            return self.pruner.images(e) // self.batch if self.pruner else self.steps_per_epoch

        self.epoch_steps = epoch_steps(cfg.epochs, whole)
        self.total_steps = sum(self.epoch_steps)
        # the learning rates' linear decay, which may end before the run (lr_hold_epochs)
        self.decay_steps = (sum(epoch_steps(cfg.epochs - cfg.lr_hold_epochs, whole)) if cfg.lr_hold_epochs
                            else self.total_steps)
        self.whiten_bias_steps = steps_in(cfg.whiten_bias_epochs, self.steps_per_epoch)
        # one epoch of each training resolution, for the warm-up (train.warm_up)
        self.warm_up_epochs = first_epoch_of_each_side(cfg.progressive, loop_epochs(cfg.epochs), data.side)
        self.step = 0
        self.alternate_whiten_bias = False  # prepare_warm_up: the throwaway warm-up task only
        # how the step runs, decided once (cifar.step): run.json's "step" says captured or eager, and why
        self.plan = plan_step(cfg, device, backend, self.epoch_steps, data.side, self.whiten_bias_steps,
                              self.world.distributed)
        self.compiled = self.plan.compiled
        self.splits = Splits(enabled=self.plan.splits)
        self.host_read_every = self.plan.host_read_every
        layout = Layout(self.total_steps, self.decay_steps, self.whiten_bias_steps, cfg.lr_floor)
        if state is None:  # allocated here, up front: the net, its optimisers, the step's buffers
            state = TrainState(cfg, self.plan, data, layout, len(range(self.batch)[self.share]))
        state.check(cfg, layout)
        self.state = state
        self.model, self.optimizers, self.averager = state.model, state.optimizers, state.averager
        self.forward_loss = state.forward_loss

    def prepare_warm_up(self) -> None:
        """Compiled, the step with the whitening bias trained and the step with
        it frozen are two graphs per training resolution: the throwaway warm-up
        task trains it at its even steps only, so that the two steps of each
        warm-up epoch compile both, in the warm-up rather than on the clock."""
        self.alternate_whiten_bias = self.compiled and self.whiten_bias_steps > 0

    def whiten_bias_grad(self) -> bool:
        """Whether this step trains the whitening bias (it freezes after ``whiten_bias_steps``)."""
        if self.alternate_whiten_bias:
            return self.step % 2 == 0
        return self.step < self.whiten_bias_steps

    def init_model(self) -> None:
        """Pad and normalise the data (DeviceData.prepare: on the clock, as the
        published recipe does), then the seed's initial net, its first conv
        (``cfg.first_conv``) and fresh optimisers, written into the state
        allocated for the config (cifar.step.TrainState)."""
        self.data.prepare()
        self.state.reset(self.cfg, self.pruner, self.splits)
        self.step = 0

    def capture_steps(self) -> None:
        """The step's graphs, recorded by the warm-up's task after its eager
        steps (train.warm_up): off the clock, kept by the shared state for
        every seed (cifar.step.Stepper). Nothing where the plan captures none."""
        self.state.stepper.capture(self)

    def variant_key(self, variant: StepVariant, index: int) -> StepKey:
        """Step ``index`` of the run's first epoch at ``variant``'s side (the capture's self-test)."""
        epoch = self.first_epoch_at(variant.side)
        rows = self.epoch_rows(epoch)
        return StepKey(rows[index % len(rows)], epoch, index, self.cfg.seed, variant.side)

    def variant_start(self, variant: StepVariant) -> int:
        """The run's step number at the start of its first epoch at ``variant``'s side."""
        return sum(self.epoch_steps[:self.first_epoch_at(variant.side)])

    def first_epoch_at(self, side: int) -> int:
        """The run's first epoch whose training side is ``side``."""
        return first_epoch_at(self.warm_up_epochs, self.cfg.progressive, self.data.side, side)

    def step_record(self) -> dict:
        """run.json's ``step``: captured or eager and why, the graphs and their capture time."""
        return self.state.stepper.record()

    def state_dict(self) -> dict:
        """Model, optimisers, step and RNG state: the run goes on bit for bit
        from here (data order and augmentation are keyed by seed, epoch and
        index, so they need no state)."""
        return {"model": self.model.state_dict(), "optimizers": [o.state_dict() for o in self.optimizers],
                "step": self.step, "torch_rng": torch.get_rng_state(),
                "sample_loss": self.pruner.sample_loss if self.pruner else None,
                "average": self.averager.state_dict() if self.averager else None,
                # recorded, not imposed: on the same machine the per-machine cache gives the same ones
                "kernel_choices": kernel_choices(self.backend)}

    def load_state_dict(self, state: dict) -> None:
        self.init_model()
        self.model.load_state_dict(state["model"])
        for opt, saved in zip(self.optimizers, state["optimizers"], strict=True):
            load_state_in_place(opt, saved)  # where a captured step reads them
        self.step = state["step"]
        self.state.step_t.fill_(self.step)
        if self.pruner is not None:  # its ranking, a copy: the state may be a live one
            self.pruner.sample_loss = state["sample_loss"].to(self.device, copy=True)
        if self.averager is not None:
            self.averager.load_state_dict(state.get("average"))
        torch.set_rng_state(state["torch_rng"])

    def learning_rates(self) -> dict[str, float]:
        """Each parameter group's learning rate at the last step, by name (the
        epoch log), from the host's copy of the table: nothing read back."""
        table = self.state.lr_host
        whiten_bias, norm_biases, head, filters = table[min(max(self.step - 1, 0), len(table) - 1)].tolist()
        return {"filters": filters, "whiten_bias": whiten_bias, "norm_biases": norm_biases, "head": head}

    def epoch_batches(self, epoch: int) -> Iterator[tuple[StepKey]]:
        """Each step's keys of ``epoch`` (after init_model): its images, a row
        of the epoch's order, which crosses to the device once; the epoch,
        the step's index, the seed and the side. The step makes its batch on
        the device from them (cifar.step.train_step): nothing is computed on
        the host or copied per step."""
        cfg = self.cfg
        if not self.data.prepared:
            raise RuntimeError("CifarTask.epoch_batches before init_model: init pads the data, on the clock")
        rows = self.epoch_rows(epoch)
        side = epoch_side(cfg.progressive, epoch, self.data.side)
        for i in range(len(rows)):
            yield (StepKey(rows[i], epoch, i, cfg.seed, side),)

    def batch_of(self, key: StepKey) -> torch.Tensor:
        """The augmented images the step of ``key`` trains on (cifar.step.make_batch)."""
        return make_batch(self.state, key, key.side)

    def epoch_rows(self, epoch: int) -> torch.Tensor:
        """``epoch``'s order on the device, one row (this rank's share of a
        step's batch) a step: the epoch's one host-to-device copy."""
        order = np.random.default_rng([self.cfg.seed, epoch]).permutation(self.n_train)
        if self.pruner is not None:
            order = self.pruner.epoch_order(order, epoch)
        steps = len(order) // self.batch
        return to_device(order[: steps * self.batch].reshape(steps, self.batch)[:, self.share], self.device)

    def train_step(self, key: StepKey) -> StepLoss:
        """One step on ``key`` (cifar.step: eager, or its graph replayed), then
        the tail average at the steps the host knows."""
        self.splits.start()
        self.model.train()
        loss = self.state.stepper(key, StepVariant(key.side, self.whiten_bias_grad()))
        self.step += 1
        if self.averager is not None:  # at steps the host knows, after the step: not in its graph
            self.averager.after_step(self.step)
        self.splits.mark("optimizer")
        return StepLoss(loss, len(key.idx))

    def evaluate(self, tta: bool, max_batches: int | None = None) -> Evaluation:
        """Test top-1 with the recipe's TTA views (``cfg.tta_level``) or one view."""
        level = self.cfg.tta_level if tta else 0
        average_bn_statistics(self.model, self.world)  # every rank evaluates the same model
        acc = evaluate(self.folded(), self.data, self.cfg, self.device, level, max_batches)
        return Evaluation(acc, None, level > 0, f"tta_level {level}")

    def folded(self) -> FoldedCifarNet:
        """The net with BN folded, into the convs the state keeps for it
        (allocated with the state: the evaluation on the clock rewrites them)."""
        self.state.folded = inference_net(self.model, self.state.folded, self.cfg.precision)
        return self.state.folded

    def warm_up_evaluation(self) -> None:
        """Every shape the run's evaluations can meet, run once (train.warm_up's
        hook): the final one's at the recipe's TTA level and, where
        intermediate evaluations run with one view (``eval_every`` or
        ``show_every`` without ``log_eval_tta``), theirs, whose batches are
        larger (no views share the forward)."""
        cfg = self.cfg
        cifar_eval.warm_up(self.folded(), self.data, cfg, self.device, cfg.tta_level)
        one_view = cfg.show_every > 0 or (cfg.eval_every > 0 and not cfg.log_eval_tta)
        if one_view and cfg.tta_level > 0:
            cifar_eval.warm_up(self.folded(), self.data, cfg, self.device, 0)

    @contextmanager
    def predictor(self, tta: bool) -> Iterator[Deployed]:
        """The BN-folded net with the TTA views (or one view), no grad, autocast,
        and the (evaluated) test set with its labels."""
        level = self.cfg.tta_level if tta else 0
        with torch.no_grad(), autocast(self.cfg.precision, self.device):
            net = self.folded()
            yield Deployed(lambda x: selective_tta_logits(net, x, level, self.cfg.tta_below,
                                                          shift_below=self.cfg.tta_shift_below),
                           self.data.test_x, self.data.test_labels, len(self.data.test_x))


# -- Saved weights ---------------------------------------------------------


def shared_tasks(data: DeviceData, device: torch.device, backend: str) -> Callable[[Config], CifarTask]:
    """A maker of tasks that share one state, allocated by the first task
    made (the run's, before the warm-up's): the warm-up and every seed of a
    command, which may differ only in their seed (cifar.step.TrainState)."""
    state: TrainState | None = None

    def make(cfg: Config) -> CifarTask:
        nonlocal state
        task = CifarTask(cfg, data, device, backend, state)
        state = task.state
        return task

    return make


def save_model(model: CifarNet, cfg: Config, path: str | os.PathLike) -> None:
    """Weights plus the config that rebuilds the net, written atomically."""
    checkpoint.save(model, cfg, path)


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu") -> CifarNet:
    """Rebuild a net saved by ``--save-model`` (in eval mode)."""
    return load_model_and_config(path, device)[0]


def load_model_and_config(path: str | os.PathLike,
                          device: str | torch.device = "cpu") -> tuple[CifarNet, Config]:
    """:func:`load_model`'s net and the config it was trained with, whose
    evaluation fields (recipe.EVALUATION_FIELDS) say how its runs evaluated it."""
    return checkpoint.load_with_config(path, device, Config, what="CIFAR model", build=net_of)


def kernel_choices(backend: str) -> dict:
    """What the cpu backend chose (run.json, checkpoints): the conv weight-gradient
    method per shape and the copy of the C++ kernels ("avx512" or "baseline")."""
    cpu = backend == "cpu"
    return {"conv_wgrad_methods": conv_group.chosen_methods() if cpu else {},
            "cpu_kernels_path": engine.cpu_path() if cpu else None}
