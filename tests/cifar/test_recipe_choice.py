"""The recipe a run takes by default (``--recipe auto``): a schedule's price
against a hand count, the choice on each CPU class and on CUDA (which keeps
the GPU's schedule), the cheapest of several schedules at a class's measured
costs, and the choice in the config, run.json's record and the report."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dawnbench_fast import cifar
from dawnbench_fast.cifar import RECIPES, Config, recipe_choice
from dawnbench_fast.cifar.recipe import CifarRecipe
from dawnbench_fast.reporting import bench

CPU = torch.device("cpu")
ZEN4 = {"vendor": "AuthenticAMD", "family": "25", "model": "17", "features": ["avx512_bf16"]}
ZEN5 = {"vendor": "AuthenticAMD", "family": "26", "model": "2", "features": ["avx512_bf16"]}
AMX = {"vendor": "GenuineIntel", "family": "6", "model": "207", "features": ["amx_bf16", "amx_tile"]}
OTHER = {"vendor": "GenuineIntel", "family": "6", "model": "85", "features": ["avx512f"]}
CLASSES = [(ZEN4, "Zen 4"), (ZEN5, "Zen 5"), (AMX, "AMX"), (OTHER, None)]
# A schedule screened for the CPU (three epochs at 20 px, two at 24, one at 28, 3.5 at 32)
LOW_SIDES = {"progressive": (20, 20, 20, 24, 24, 28)}


@pytest.fixture
def two_cpu_schedules(monkeypatch):
    """A second CPU schedule at the bar beside the default, as a screened one that passed would be."""
    monkeypatch.setitem(RECIPES, "low_sides", LOW_SIDES)
    monkeypatch.setattr(recipe_choice, "CPU_RECIPES", ("low_sides", "dawnbench_fast"))


def test_a_schedule_s_price_against_a_hand_count():
    costs = recipe_choice.side_costs("Zen 4")
    assert (costs[20], costs[24], costs[28], costs[32]) == (0.374, 0.517, 0.78, 1.0)
    # 50,000 // 1536 = 32 steps an epoch, 9.5 epochs: 9 x 32 + 16 steps; each epoch at its side
    low = recipe_choice.schedule_cost(CifarRecipe(**LOW_SIDES), costs)
    assert low == pytest.approx(3 * 0.374 + 2 * 0.517 + 0.78 + 3.5)
    assert recipe_choice.schedule_cost(CifarRecipe(), costs) == pytest.approx(3 * 0.517 + 3 * 0.78 + 3.5)
    # a smaller batch: 50,000 // 1024 = 48 steps an epoch, 8.5 epochs = 8 x 48 + 24 steps
    small = CifarRecipe(batch_size=1024, epochs=8.5)
    assert recipe_choice.schedule_cost(small, costs) == pytest.approx(3 * 0.517 + 3 * 0.78 + 2.5)
    # a class without measurements: the net's multiply-accumulates (20 px: 19, 9, 4 after the convs)
    share = recipe_choice.side_costs(None)
    assert share[20] == pytest.approx(recipe_choice.mac_share(20)) and 0.34 < share[20] < 0.36
    assert share[32] == 1.0 and recipe_choice.mac_share(32) == 1.0
    # the AMX Xeon: 24 and 28 px measured, 20 px by the arithmetic
    amx = recipe_choice.side_costs("AMX")
    assert (amx[24], amx[28], amx[20]) == (0.64, 0.82, recipe_choice.mac_share(20))


@pytest.mark.parametrize(("cpu", "name"), CLASSES, ids=["zen4", "zen5", "amx", "other"])
def test_auto_on_each_cpu_class_takes_the_schedule_at_the_bar_and_says_why(cpu, name):
    choice = recipe_choice.choose("auto", CPU, cpu)
    assert choice == recipe_choice.RecipeChoice("auto", "dawnbench_fast", choice.why)
    price = recipe_choice.schedule_cost(CifarRecipe(), recipe_choice.side_costs(name))
    assert choice.why.startswith(f"auto on the CPU: the one schedule at the accuracy bar so far, {price:.2f} "
                                 "32-px epochs of training at ")
    if name in recipe_choice.SIDE_COSTS:
        assert choice.why.endswith(f"{name}'s measured step costs per side")
    else:
        assert f"({name or 'this CPU class'} has no measured step costs)" in choice.why


@pytest.mark.parametrize(("cpu", "name"), CLASSES, ids=["zen4", "zen5", "amx", "other"])
def test_auto_takes_the_cheapest_schedule_at_each_class_s_costs(two_cpu_schedules, cpu, name):
    choice = recipe_choice.choose("auto", CPU, cpu)
    assert choice.recipe == "low_sides"
    costs = recipe_choice.side_costs(name)
    low = recipe_choice.schedule_cost(CifarRecipe(**LOW_SIDES), costs)
    default = recipe_choice.schedule_cost(CifarRecipe(), costs)
    assert low < default
    assert f"the cheapest schedule at the accuracy bar, {low:.2f} 32-px epochs" in choice.why
    assert choice.why.endswith(f"(against dawnbench_fast {default:.2f})")
    if name == "AMX":  # its 20-px step is not measured: priced by the arithmetic, and said
        assert "(20 px: the arithmetic's share, not measured there)" in choice.why


def test_the_choice_follows_the_class_s_costs(two_cpu_schedules, monkeypatch):
    # a CPU whose small sides cost as much as 32 px keeps the schedule with fewer small sides
    monkeypatch.setitem(recipe_choice.SIDE_COSTS, "Zen 5", {20: 1.0, 24: 0.5, 28: 0.5})
    assert recipe_choice.choose("auto", CPU, ZEN5).recipe == "dawnbench_fast"
    assert recipe_choice.choose("auto", CPU, ZEN4).recipe == "low_sides"


def test_cuda_keeps_the_gpu_schedule_and_a_named_recipe_is_obeyed(two_cpu_schedules):
    choice = recipe_choice.choose("auto", torch.device("cuda"))
    assert (choice.requested, choice.recipe) == ("auto", "dawnbench_fast")
    assert "GPU's schedule" in choice.why
    for device in (CPU, torch.device("cuda")):
        for name in ("dawnbench_fast", "low_sides", "airbench94_muon"):
            asked = recipe_choice.RecipeChoice(name, name, "asked for")
            assert recipe_choice.choose(name, device, AMX) == asked


def test_the_default_command_line_takes_the_choice_and_records_it(two_cpu_schedules, monkeypatch):
    monkeypatch.setattr(recipe_choice, "cpu_info", lambda: ZEN4)
    cfg = cifar.config_from_args(cifar.build_parser().parse_args([]))
    assert cfg == dataclasses.replace(Config(**LOW_SIDES), extra=cfg.extra)
    assert cfg.extra["recipe"] == "low_sides"
    assert cfg.extra["recipe_choice"] == recipe_choice.choose("auto", CPU, ZEN4).record()
    # flags on top of the choice, as on top of a named recipe
    cfg = cifar.config_from_args(cifar.build_parser().parse_args(["--epochs", "10", "--set", "lr_floor=0.1"]))
    assert (cfg.progressive, cfg.epochs, cfg.lr_floor) == (LOW_SIDES["progressive"], 10, 0.1)
    # a named recipe is what runs, chosen by no one but the user
    cfg = cifar.config_from_args(cifar.build_parser().parse_args(["--recipe", "dawnbench_fast"]))
    assert cfg == dataclasses.replace(Config(), extra={"recipe": "dawnbench_fast"})
    # where CUDA is the device, auto is the GPU's schedule
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg = cifar.config_from_args(cifar.build_parser().parse_args([]))
    assert cfg == dataclasses.replace(Config(), extra=cfg.extra) and cfg.extra["recipe"] == "dawnbench_fast"


def test_the_report_names_the_recipe_and_why():
    choice = recipe_choice.choose("auto", CPU, ZEN4)
    cfg = Config(extra={"recipe": choice.recipe, "recipe_choice": choice.record()})
    result = {"seed": 0, "final_top1": 0.9412, "tta_seconds": 400.0, "tta_epoch": 10, "train_cost_usd": None,
              "latency_ms": None, "warmup_seconds": 5.0, "epochs": [], "phases_seconds": {"train": 395.0},
              "train_split_seconds": {}}
    text = bench.report_text([result], cfg, None, "CPU", "cpu")
    assert f"recipe: dawnbench_fast ({choice.why})" in text.splitlines()
    assert "recipe:" not in bench.report_text([result], Config(), None, "CPU", "cpu")
