"""The step's plan (cifar/step.py's plan_step): the step's graphs counted
by hand for the default's curriculum, each configuration the captured step
cannot serve named with its reason, and every device decision of the step
made there."""

from __future__ import annotations

import torch

from dawnbench_fast.cifar import Config
from dawnbench_fast.cifar.step import StepPlan, StepVariant, plan_step, step_variants
from dawnbench_fast.execution.runtime import FINITE_CHECK_EVERY
from dawnbench_fast.training.task import epoch_steps, steps_in

CUDA, CPU = torch.device("cuda"), torch.device("cpu")


def plan_of(device: torch.device, steps: list[int], progressive: tuple[int, ...], full_side: int,
                 bias: int, prune: float = 0.0, distributed: bool = False, choice: str = "auto",
                 compile_mode: str | None = None) -> StepPlan:
    """plan_step for a recipe with these fields (compiled in ``compile_mode``, or not at all)."""
    cfg = Config(progressive=progressive, prune=prune, capture=choice, precision="fp32", kernels="torch",
                 compile="on" if compile_mode else "off", compile_mode=compile_mode or "auto")
    return plan_step(cfg, device, "torch", steps, full_side, bias, distributed)


def test_the_device_decisions_are_the_plan_s():
    """The CPU: ATen's fused add (its bits), each bank alone, the loop reading
    every step, host timings; a GPU: a multiply then an add (nothing read
    back), the banks batched, a read every FINITE_CHECK_EVERY steps, a clock
    that waits for the device."""
    cpu, gpu = plan_of(CPU, [4], (), 32, 0), plan_of(CUDA, [4], (), 32, 0)
    def decisions(p: StepPlan) -> tuple:
        return p.fma, p.batch_banks, p.host_read_every, p.synchronize, p.splits

    assert decisions(cpu) == (True, False, 1, False, True)
    assert decisions(gpu) == (False, True, FINITE_CHECK_EVERY, True, False)
    assert not cpu.compiled and plan_of(CUDA, [4], (), 32, 0, compile_mode="default").compiled


def test_the_default_s_graphs_against_a_hand_count():
    cfg = Config()
    per_epoch = 50_000 // cfg.batch_size  # 32 steps of 1536
    steps = epoch_steps(cfg.epochs, lambda e: per_epoch)
    bias = steps_in(cfg.whiten_bias_epochs, per_epoch)
    assert (per_epoch, steps, bias) == (32, [32] * 9 + [16], 7)  # 9.5 epochs; 0.2 of an epoch, rounded up
    plan = plan_of(CUDA, steps, cfg.progressive, 32, bias)
    assert plan.captured and plan.eager_why == ()
    # epochs 1-3 at 24 px (the bias trains for the first 7 steps), 4-6 at 28, the rest at 32
    assert list(plan.variants.items()) == [(StepVariant(24, True), 7), (StepVariant(24, False), 96 - 7),
                                           (StepVariant(28, False), 96), (StepVariant(32, False), 96 + 16)]
    assert sum(plan.variants.values()) == sum(steps)
    assert plan.record()["variants"] == {"24px/whiten-bias": 7, "24px/frozen": 89, "28px/frozen": 96,
                                         "32px/frozen": 112}


def test_a_bias_that_outlives_the_first_side_and_no_curriculum():
    v = step_variants([3, 3, 2], (20, 24), 32, whiten_bias_steps=4)
    assert v == {StepVariant(20, True): 3, StepVariant(24, True): 1, StepVariant(24, False): 2,
                 StepVariant(32, False): 2}
    assert step_variants([5, 5], (), 32, 0) == {StepVariant(32, False): 10}


def test_what_the_captured_step_cannot_serve_is_named():
    steps = [4, 4]
    assert not plan_of(CPU, steps, (), 32, 0).captured
    assert "CUDA devices only" in plan_of(CPU, steps, (), 32, 0).eager_why[0]
    pruned = plan_of(CUDA, steps, (), 32, 0, prune=0.5)
    assert not pruned.captured and "--set prune" in pruned.eager_why[0]
    job = plan_of(CUDA, steps, (), 32, 0, distributed=True)
    assert job.record()["captured"] is False and "torchrun" in job.record()["eager_why"][0]
    assert len(plan_of(CPU, steps, (), 32, 0, prune=0.5, distributed=True).eager_why) == 3


def test_the_choices_of_capture_and_torch_compiles_own_graphs():
    steps = [4, 4]
    off = plan_of(CUDA, steps, (), 32, 0, choice="off")
    assert not off.captured and not off.uses_static_step and "capture=off" in off.eager_why[0]
    static = plan_of(CUDA, steps, (), 32, 0, choice="static")
    assert not static.captured and static.uses_static_step and static.record()["static_inputs"]
    # static on the CPU too (the plumbing without a GPU), but never where the run is blocked
    assert plan_of(CPU, steps, (), 32, 0, choice="static").uses_static_step
    assert not plan_of(CPU, steps, (), 32, 0, prune=0.5, choice="static").uses_static_step
    for mode in ("reduce-overhead", "max-autotune"):
        own = plan_of(CUDA, steps, (), 32, 0, compile_mode=mode)
        assert not own.captured and f"compile_mode={mode}" in own.eager_why[0]
    assert plan_of(CUDA, steps, (), 32, 0, compile_mode="max-autotune-no-cudagraphs").captured


def test_compile_mode_auto_is_the_records_on_cuda_and_a_bad_one_is_refused():
    import pytest

    from dawnbench_fast.config.overrides import ConfigError
    from dawnbench_fast.execution import gpu_defaults

    assert gpu_defaults.compile_mode("auto", CUDA) == "max-autotune-no-cudagraphs"
    assert gpu_defaults.compile_mode("auto", CPU) == "default"
    assert gpu_defaults.compile_mode("reduce-overhead", CPU) == "reduce-overhead"
    with pytest.raises(ConfigError, match="compile_mode=fast: must be one of auto, default"):
        gpu_defaults.compile_mode("fast", CUDA)
    from dawnbench_fast.cifar.recipe import apply_overrides

    with pytest.raises(ConfigError, match="compile_mode"):
        apply_overrides(Config(), ["compile_mode=fast"])
    with pytest.raises(ConfigError, match="capture"):
        apply_overrides(Config(), ["capture=always"])
