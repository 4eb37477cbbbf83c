"""``torch.compile`` of the training step (dawnbench_fast.execution.gpu_defaults): on by
default on CUDA only, ``--compile`` / ``--no-compile`` and ``--set compile=``;
the compiled step computes what the eager one does; and the warm-up compiles
every graph the timed run needs, so nothing compiles on the clock.

No GPU here: the compiled path is forced on the CPU (``compile="on"``), where
Inductor generates C++ instead of Triton. Inductor compiles each kernel with
the host compiler, about 1-5 s each on 2 busy cores, so its test uses the
smallest net that holds the step's kinds of op (conv, max-pool, BN in training
mode with its running statistics, GELU, the head, the label-smoothed loss):
the project's net at any width is some 60 kernels, over 90 s to compile here.
The project's own net and CifarTask are covered through the same wrapper with
Dynamo's capture and no code generation (a counting backend), which is what
decides which graphs exist and when they compile.
"""

from __future__ import annotations

import dataclasses
from itertools import islice

import pytest
import torch
import torch.nn.functional as F
from support.cifar_data import cifar_dir

from dawnbench_fast import cifar
from dawnbench_fast.cifar import CifarTask, Config
from dawnbench_fast.cifar.step import forward_loss
from dawnbench_fast.config import config_file
from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.execution import gpu_defaults
from dawnbench_fast.runner import cli, command
from dawnbench_fast.runner.runs import warm_up_run
from dawnbench_fast.training import train


class TinyNet(torch.nn.Module):
    """conv -> max-pool -> BN (training mode) -> GELU -> global max-pool -> head:
    the step's kinds of op, a dozen Inductor kernels forward and backward."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 10, bias=False)

    def forward(self, x: torch.Tensor, whiten_bias_grad: bool = True) -> torch.Tensor:
        x = F.gelu(self.bn(F.max_pool2d(self.conv(x), 2)))
        return self.head(F.max_pool2d(x, x.shape[-1]).flatten(1)) / 8


def _steps(step_fn, steps: int = 3) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Losses of ``steps`` Nesterov SGD steps of a seeded TinyNet, and its final state."""
    torch.manual_seed(0)
    model = TinyNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 3, 8, 8, generator=gen)
        y = torch.randint(0, 10, (8,), generator=gen)
        loss = step_fn(model, x, y, True, "fp32", 0.2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, model.state_dict()


@pytest.mark.build
def test_inductor_compiled_step_computes_what_the_eager_step_does(monkeypatch):
    # One process compiling a dozen small kernels: a worker pool would cost more than it saves.
    monkeypatch.setattr(torch._inductor.config, "compile_threads", 1)
    torch._dynamo.reset()
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    eager, eager_state = _steps(forward_loss)
    compiled, compiled_state = _steps(gpu_defaults.compiled(forward_loss))
    # it really ran compiled: one graph, nothing left to eager Python by a graph break
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs_before + 1
    assert not torch._dynamo.utils.counters["graph_break"]
    # Tolerance. In fp32 both compute the same math; Inductor's fused kernels
    # only sum in another order (BN statistics, the loss), a few ulps per
    # value. Measured here: 2e-7 relative on the losses of 3 steps, 6e-8 on
    # the weights and BN running statistics. 1e-5 leaves 50x margin and still
    # sees any change of the step: label smoothing 0.1 instead of 0.2 moves the
    # loss by about 1e-2, a BN statistics update lost moves the running stats by 1e-1.
    assert compiled == pytest.approx(eager, rel=1e-5)
    for name, value in eager_state.items():
        torch.testing.assert_close(compiled_state[name], value, rtol=1e-5, atol=1e-6, msg=name)
    torch._dynamo.reset()


@pytest.fixture
def counting_backend(monkeypatch):
    """Dynamo captures graphs as for Inductor but runs them as captured (no code
    generation): the list holds each graph compiled, in order."""
    graphs: list = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    monkeypatch.setattr(gpu_defaults, "COMPILE_BACKEND", backend)
    torch._dynamo.reset()
    yield graphs
    torch._dynamo.reset()


@pytest.mark.parametrize("progressive, whiten_bias_epochs, warm_up_graphs", [
    ((), 1, 2),  # the step with the whitening bias trained, and frozen
    # epoch 1 on 24-px crops: the run meets (24 px, trained), (32, trained), (32, frozen); the
    # warm-up compiles each resolution with the bias trained and frozen
    ((24,), 1.5, 4),
])
@pytest.mark.parametrize("capture", ["off", "static"])  # static: the captured step's body, eagerly
def test_the_warm_up_compiles_every_graph_and_the_run_compiles_none(counting_backend, progressive,
                                                                   whiten_bias_epochs, warm_up_graphs,
                                                                   capture):
    # 4 steps an epoch, the whitening bias frozen part-way: the run meets both forms of the step
    cfg = Config(subset=64, batch_size=16, eval_subset=100, whiten_images=64, widths=(8, 8, 8), epochs=2,
                 whiten_bias_epochs=whiten_bias_epochs, progressive=progressive, compile="on",
                 device="cpu", kernels="torch", precision="bf16", data_dir=str(cifar_dir()), download=False,
                 capture=capture)
    task = cfg.build_task(torch.device("cpu"))
    assert task.compiled and task.whiten_bias_steps == 4 * whiten_bias_epochs
    # the warm-up's throwaway task, as dawnbench_fast.runner.runs makes it
    warm_up_run(lambda c: CifarTask(c, task.data, task.device, task.backend, task.state), task.cfg)
    assert len(counting_backend) == warm_up_graphs
    task.init_model()
    losses = [task.train_step(*b).per_example() for b in islice(train.batches_forever(task), 8)]
    assert task.step > task.whiten_bias_steps
    assert len(counting_backend) == warm_up_graphs  # nothing compiled on the clock
    # the captured graphs are the eager step, op for op: the same losses to the bit
    eager = CifarTask(dataclasses.replace(task.cfg, compile="off", capture="off"), task.data, task.device,
                      task.backend)
    assert not eager.compiled and eager.forward_loss is forward_loss
    eager.init_model()
    assert losses == [eager.train_step(*b).per_example() for b in islice(train.batches_forever(eager), 8)]


def test_compile_defaults_to_cuda_only():
    cpu, cuda = torch.device("cpu"), torch.device("cuda:0")
    assert Config().compile == "auto"
    assert not gpu_defaults.compile_enabled("auto", cpu) and gpu_defaults.compile_enabled("auto", cuda)
    assert gpu_defaults.compile_enabled("on", cpu) and not gpu_defaults.compile_enabled("off", cuda)
    with pytest.raises(ConfigError, match=r"--set compile=yes: must be auto, on or off"):
        gpu_defaults.compile_enabled("yes", cpu)


def _config(argv: list[str]) -> Config:
    return cifar.config_from_args(config_file.parse_args(cifar.build_parser(), argv))


def test_compile_flags_and_set(tmp_path):
    out: list[str] = []
    assert _config(out).compile == "auto"
    assert _config([*out, "--compile"]).compile == "on"
    assert _config([*out, "--no-compile"]).compile == "off"
    assert _config([*out, "--set", "compile=off"]).compile == "off"
    with pytest.raises(ConfigError, match="compile=maybe: must be auto, on or off"):
        _config([*out, "--set", "compile=maybe"])
    # --config FILE: the file's value, unless --compile / --no-compile is given beside it
    saved = tmp_path / "config.json"
    saved.write_text(cli.json_dumps(dataclasses.asdict(_config([*out, "--compile"]))))
    assert _config([*out, "--config", str(saved)]).compile == "on"
    assert _config([*out, "--config", str(saved), "--no-compile"]).compile == "off"
    saved.write_text(saved.read_text().replace('"compile": "on"', '"compile": "sometimes"'))
    with pytest.raises(ConfigError, match=r"--config .*config.json: field compile=sometimes"):
        _config([*out, "--config", str(saved)])


def test_cudnn_autotuning_on_cuda_unless_deterministic(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    gpu_defaults.configure_cuda(torch.device("cpu"), deterministic=False)
    assert torch.backends.cudnn.benchmark is False  # the CPU has no cuDNN: left alone
    gpu_defaults.configure_cuda(torch.device("cuda:0"), deterministic=False)
    assert torch.backends.cudnn.benchmark is True
    gpu_defaults.configure_cuda(torch.device("cuda:0"), deterministic=True)
    assert torch.backends.cudnn.benchmark is False
    record = gpu_defaults.execution_record(torch.device("cpu"), Config())
    assert record == {"compile": False, "compile_choice": "auto", "compile_backend": None,
                      "compile_mode": None, "cudnn_benchmark": False, "clock": "host"}
    on = gpu_defaults.execution_record(torch.device("cpu"), Config(compile="on"))
    assert (on["compile"], on["compile_mode"]) == (True, "default")


def test_profile_steps_profiles_the_eager_step_unless_compile_is_asked_for(monkeypatch, tmp_path):
    # on the CPU, with auto compiling as on CUDA: the roofline counts ops, which a compiled region
    # hides (on CUDA itself the trainer's own compiled and captured step is profiled: profiled_task)
    monkeypatch.setattr(gpu_defaults, "compile_enabled", lambda choice, device: choice in ("auto", "on"))
    profiled = []
    monkeypatch.setattr(command, "profile_steps",
                        lambda task, _n, out, _timer, _warm: profiled.append(task) or out)
    base = ["--subset", "64", "--batch-size", "32", "--set", "whiten_images=64", "--eval-subset", "100",
            "--data-dir", str(cifar_dir()), "--no-download", "--device", "cpu", "--kernels", "torch",
            "--profile-steps", "1"]
    assert cifar.main([*base, "--out", str(tmp_path / "a")]) == 0
    assert cifar.main([*base, "--out", str(tmp_path / "b"), "--compile"]) == 0
    assert [task.compiled for task in profiled] == [False, True]
