"""The CPU's schedule and the recipe a run takes by default (``--recipe
auto``): the schedule's steps, sides and learning rates against a hand count,
a schedule's price against a hand count, the choice on each CPU class and on
CUDA (which keeps the GPU's schedule), the choice following a class's costs,
the choice in the config, run.json's record and the report, the schedule
against its committed runs, and a run resumed mid-schedule against the
uninterrupted one, bit for bit."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from support.cifar_data import cifar_dir
from support.resume import assert_same_weights, stopped_and_resumed, train_epochs

from dawnbench_fast import cifar
from dawnbench_fast.cifar import RECIPES, Config, recipe_choice
from dawnbench_fast.cifar.recipe import CifarRecipe
from dawnbench_fast.data.progressive import epoch_side
from dawnbench_fast.reporting import bench

CPU = torch.device("cpu")
ZEN4 = {"vendor": "AuthenticAMD", "family": "25", "model": "17", "features": ["avx512_bf16"]}
ZEN5 = {"vendor": "AuthenticAMD", "family": "26", "model": "2", "features": ["avx512_bf16"]}
AMX = {"vendor": "GenuineIntel", "family": "6", "model": "207", "features": ["amx_bf16", "amx_tile"]}
OTHER = {"vendor": "GenuineIntel", "family": "6", "model": "85", "features": ["avx512f"]}
CLASSES = [(ZEN4, "Zen 4"), (ZEN5, "Zen 5"), (AMX, "AMX"), (OTHER, None)]
# A schedule screened for the CPU (three epochs at 20 px, two at 24, one at 28, 3.5 at 32)
LOW_SIDES = {"progressive": (20, 20, 20, 24, 24, 28)}
RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
RECORD = RESULTS / "seeds-zen4-1a2be16" / "epochs-9.75"  # the CPU schedule's ten-seed record


@pytest.fixture
def two_cpu_schedules(monkeypatch):
    """Another CPU schedule at the bar beside the default, cheaper than the CPU's own."""
    monkeypatch.setitem(RECIPES, "low_sides", LOW_SIDES)
    monkeypatch.setattr(recipe_choice, "CPU_RECIPES", ("low_sides", "dawnbench_fast"))


def test_the_cpu_schedule_s_steps_sides_and_learning_rates_against_a_hand_count():
    # the full set: 50,000 // 1536 = 32 steps an epoch; 9.75 epochs = 9 x 32 + 24 = 312 steps;
    # the decay over 9.75 - 0.375 = 9.375 epochs = 9 x 32 + 12 = 300 steps, then held at 0.05;
    # the whitening bias 0.2 x 32 = 6.4 -> 7 steps
    cfg = Config(**RECIPES["dawnbench_fast_cpu"], data_dir=str(cifar_dir()), download=False)
    task = cfg.build_task(CPU)
    assert task.epoch_steps == [32] * 9 + [24]
    assert (task.total_steps, task.decay_steps, task.whiten_bias_steps) == (312, 300, 7)
    # five epochs at 24 px, one at 28, the last 3.75 at 32
    assert [epoch_side(cfg.progressive, e, 32) for e in range(10)] == [24] * 5 + [28] + [32] * 4
    assert task.warm_up_epochs == (0, 5, 6)  # one epoch of each side, for the warm-up
    table = task.state.lr_host
    for s in (0, 1, 100, 284, 286, 299, 300, 311):
        f = max(0.05, 1 - s / 300)  # 1 - 284/300 > 0.05 > 1 - 286/300: the floor from step 285
        whiten, norm_biases, head, filters = table[s].tolist()
        assert filters == pytest.approx(cfg.lr_filters * f, rel=1e-6)
        assert head == pytest.approx(cfg.lr_head * f, rel=1e-6)
        assert norm_biases == pytest.approx(cfg.lr_bias * f, rel=1e-6)
        assert whiten == pytest.approx(cfg.lr_bias * max(0.0, 1 - s / 7), rel=1e-6, abs=1e-12)
    # the GPU's schedule is the same but for its sides, its length and its evaluation's cascade
    assert (cfg.tta_below, cfg.tta_shift_below) == (0.8, 0.6)
    gpu = dataclasses.replace(cfg, progressive=Config().progressive, epochs=Config().epochs,
                              tta_shift_below=1.0, data_dir=None, download=True)
    assert gpu == Config()


def test_the_cpu_schedule_s_record_is_ten_seeds():
    assert sorted(p.parent.name for p in RECORD.glob("seed*/run.json")) == [f"seed{s}" for s in range(10)]


@pytest.mark.parametrize("path", sorted(RECORD.glob("seed*/run.json")), ids=lambda p: p.parent.name)
def test_the_cpu_schedule_is_its_committed_runs_config(path):
    """The recipe field for field against the run.json ``config`` of its ten-seed record."""
    recorded = json.loads(path.read_text())["config"]
    schedule = json.loads(json.dumps(dataclasses.asdict(Config(**RECIPES["dawnbench_fast_cpu"]))))
    as_run = {"precision", "data_dir", "extra", "seed"}
    changed = {k: (v, recorded.get(k)) for k, v in schedule.items()
               if k not in as_run and v != recorded.get(k)}
    assert not changed


def test_a_schedule_s_price_against_a_hand_count():
    costs = recipe_choice.side_costs("Zen 4")
    assert (costs[20], costs[24], costs[28], costs[32]) == (0.374, 0.517, 0.78, 1.0)
    # 50,000 // 1536 = 32 steps an epoch, 9.5 epochs: 9 x 32 + 16 steps; each epoch at its side
    low = recipe_choice.schedule_cost(CifarRecipe(**LOW_SIDES), costs)
    assert low == pytest.approx(3 * 0.374 + 2 * 0.517 + 0.78 + 3.5)
    assert recipe_choice.schedule_cost(CifarRecipe(), costs) == pytest.approx(3 * 0.517 + 3 * 0.78 + 3.5)
    cpu = recipe_choice.schedule_cost(CifarRecipe(**RECIPES["dawnbench_fast_cpu"]), costs)
    assert cpu == pytest.approx(5 * 0.517 + 0.78 + 3.75)  # 9.75 epochs: 9 x 32 + 24 steps
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
def test_auto_on_each_cpu_class_takes_the_cpu_schedule_and_says_why(cpu, name):
    choice = recipe_choice.choose("auto", CPU, cpu)
    assert choice == recipe_choice.RecipeChoice("auto", "dawnbench_fast_cpu", choice.why)
    costs = recipe_choice.side_costs(name)
    cpu_price = recipe_choice.schedule_cost(CifarRecipe(**RECIPES["dawnbench_fast_cpu"]), costs)
    gpu_price = recipe_choice.schedule_cost(CifarRecipe(), costs)
    assert cpu_price < gpu_price
    assert choice.why.startswith("auto on the CPU: the cheapest schedule at the accuracy bar, "
                                 f"{cpu_price:.2f} 32-px epochs of training at ")
    assert choice.why.endswith(f"(against dawnbench_fast {gpu_price:.2f})")
    if name in recipe_choice.SIDE_COSTS:
        assert f"{name}'s measured step costs per side" in choice.why
    else:
        assert f"({name or 'this CPU class'} has no measured step costs)" in choice.why


def test_with_one_schedule_at_the_bar_auto_says_so(monkeypatch):
    monkeypatch.setattr(recipe_choice, "CPU_RECIPES", ("dawnbench_fast",))
    choice = recipe_choice.choose("auto", CPU, ZEN4)
    assert choice.recipe == "dawnbench_fast"
    assert choice.why == ("auto on the CPU: the one schedule at the accuracy bar so far, 7.39 32-px epochs "
                          "of training at Zen 4's measured step costs per side")


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


def test_the_choice_follows_the_class_s_costs(monkeypatch):
    # a CPU whose 24-px step cost more than its 28-px one would keep the GPU's three 28-px epochs
    monkeypatch.setitem(recipe_choice.SIDE_COSTS, "Zen 5", {24: 0.9, 28: 0.8})
    assert recipe_choice.choose("auto", CPU, ZEN5).recipe == "dawnbench_fast"
    assert recipe_choice.choose("auto", CPU, ZEN4).recipe == "dawnbench_fast_cpu"


def test_cuda_keeps_the_gpu_schedule_and_a_named_recipe_is_obeyed(two_cpu_schedules):
    choice = recipe_choice.choose("auto", torch.device("cuda"))
    assert (choice.requested, choice.recipe) == ("auto", "dawnbench_fast")
    assert "GPU's schedule" in choice.why
    for device in (CPU, torch.device("cuda")):
        for name in ("dawnbench_fast", "low_sides", "airbench94_muon"):
            asked = recipe_choice.RecipeChoice(name, name, "asked for")
            assert recipe_choice.choose(name, device, AMX) == asked


def test_the_default_command_line_takes_the_choice_and_records_it(monkeypatch):
    monkeypatch.setattr(recipe_choice, "cpu_info", lambda: ZEN4)
    cfg = cifar.config_from_args(cifar.build_parser().parse_args([]))
    assert cfg == dataclasses.replace(Config(**RECIPES["dawnbench_fast_cpu"]), extra=cfg.extra)
    assert cfg.extra["recipe"] == "dawnbench_fast_cpu"
    assert cfg.extra["recipe_choice"] == recipe_choice.choose("auto", CPU, ZEN4).record()
    # flags on top of the choice, as on top of a named recipe
    cfg = cifar.config_from_args(cifar.build_parser().parse_args(["--epochs", "10", "--set", "lr_floor=0.1"]))
    assert (cfg.progressive, cfg.epochs, cfg.lr_floor) == ((24, 24, 24, 24, 24, 28), 10, 0.1)
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
    assert f"recipe: dawnbench_fast_cpu ({choice.why})" in text.splitlines()
    assert "recipe:" not in bench.report_text([result], Config(), None, "CPU", "cpu")


def _task() -> object:
    """The CPU schedule on a tiny task: 128 images, 2 steps of 64 an epoch, a narrow net,
    7.5 epochs (its six low-resolution epochs, then 1.5 at 32 px)."""
    cfg = Config(**{**RECIPES["dawnbench_fast_cpu"], "epochs": 7.5}, subset=128, eval_subset=100,
                 batch_size=64, whiten_images=64, widths=(8, 16, 16), kernels="torch", precision="fp32",
                 data_dir=str(cifar_dir()), download=False, deterministic=True)
    return cfg.build_task(CPU)


def test_a_run_resumed_mid_schedule_is_the_uninterrupted_run():
    # 7.5 epochs of 2 steps: 15 steps at 24 px (epochs 0-4), 28 px (5), then 32 px; the decay ends at
    # step 15 (7.125 epochs), the average sets the net from step 7 every 4 steps. Stopped after
    # epoch 4 (step 10, the average under way), the resumed run changes side twice
    straight = _task()
    assert straight.epoch_steps == [2] * 7 + [1]
    straight.init_model()
    train_epochs(straight, range(8))
    first, resumed = stopped_and_resumed(_task, 5, 8)
    assert first.step == 10 and first.averager.average is not None
    assert resumed.step == straight.step == 15
    assert_same_weights(straight, resumed)
