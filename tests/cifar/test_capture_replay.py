"""The captured step proven on the CPU: a replay that runs no Python.

support/recorders.py's AtenRecorder logs the ATen ops of one run of the
step's body and replays the log, as a CUDA graph replays its kernels: what a
capture would freeze is frozen, a tensor replaced by a new one is not seen.
Driven through the trainer's own loop (a warm-up, then two seeds, one shared
state), with the GPU's arithmetic (``fma=False``: no learning rate read on
the host), it must give the eager step's losses and weights bit for bit,
and fail where a fault is planted. The capture's self-test and its fall back
to the eager body, the dispatcher-level trap for host work, the compiled
step's recompilations and CudaRecorder's protocol are checked here too."""

from __future__ import annotations

import contextlib

import pytest
import torch
from support.host_reads import HostOp, no_host_ops
from support.recorders import AtenRecorder, ReplayingRecorder
from support.seed_runs import same_weights, seed_runs

from dawnbench_fast.cifar import step as cifar_step
from dawnbench_fast.cifar import train_state
from dawnbench_fast.cifar.step import TrainState
from dawnbench_fast.reporting.bench import step_line


@pytest.fixture
def gpu_arithmetic(monkeypatch):
    """The optimisers' updates as on a GPU: a multiply then an add, the rate a
    tensor operand (the CPU's fused add reads it on the host as ``alpha``)."""
    monkeypatch.setattr(cifar_step, "FMA_DEVICES", ())


def live_tensors(task) -> dict[str, torch.Tensor]:
    """Every tensor of the task that the step reads: the net, the optimisers'
    state and the step counter, the data, the labels, the normalisation,
    the rate table and the static inputs."""
    static = task.state.stepper.static
    named = {f"state[{i}]": t for i, t in enumerate(cifar_step.mutable_tensors(task.state))}
    named.update(padded=task.data.padded, labels=task.data.train_labels, scale=task.data.scale,
                 shift=task.data.shift, lr_table=task.state.lr_table,
                 idx=static.idx, epoch=static.epoch, seed=static.seed)
    return named


def test_a_replay_without_python_through_the_loop_is_the_eager_step(monkeypatch, gpu_arithmetic):
    eager = seed_runs("off", (0, 1))
    recorder = AtenRecorder()
    unread: list[list[str]] = []

    def check_addresses(task):  # after each seed's reset and data preparation
        reads = set().union(*(g.reads() for g in recorder.graphs))
        unread.append([k for k, t in live_tensors(task).items() if t.data_ptr() not in reads])

    got = seed_runs("static", (0, 1), recorder, after_init=check_addresses)
    assert got.losses == eager.losses
    assert got.losses[0] != got.losses[1]  # the two seeds differ
    assert same_weights(got.weights, eager.weights) == []
    assert got.records[0]["captured"] and got.records[0]["capture_failed"] is None
    assert all(t["bitwise"] for t in got.records[0]["self_test"].values())
    assert len(recorder.graphs) == 3  # 24 px with the bias trained and frozen, 32 px frozen
    # each graph replayed once after its capture and twice in its self-test, then every seed's 4 steps
    assert recorder.replays == 3 * 3 + 2 * 4
    # every tensor the step reads is one the graphs read, at the address they read it
    assert unread == [[], []]


def _counter_in_the_body(monkeypatch):
    """A Python counter in the body: the epoch offset by how many times the
    body ran (a captured graph keeps the count it saw at the capture)."""
    calls = [0]
    real = cifar_step.train_step

    def body(state, key, variant):
        calls[0] += 1
        # a Python int folded into a tensor op: frozen in a capture
        return real(state, key._replace(epoch=key.epoch + calls[0]), variant)

    monkeypatch.setattr(cifar_step, "train_step", body)


def _rate_read_on_the_host(monkeypatch):
    """The CPU's own arithmetic: ATen's fused add takes the rate as ``alpha``,
    a Python scalar read from the tensor at the call (frozen in a capture)."""
    monkeypatch.setattr(cifar_step, "FMA_DEVICES", ("cpu",))


def _step_counter_rebuilt(monkeypatch):
    """The state's reset makes a new step counter instead of zeroing the one
    the step reads."""
    real = TrainState.reset

    def reset(self, *args, **kwargs):
        old = self.step_t
        before = None if old is None else old.clone()
        real(self, *args, **kwargs)
        if old is not None:  # the old counter left as it was, a new one made
            old.copy_(before)
            self.step_t = torch.zeros_like(old)

    monkeypatch.setattr(TrainState, "reset", reset)


def _momentum_rebuilt(monkeypatch):
    """The optimisers' reset drops their buffers (the next step makes new ones)
    instead of zeroing them in place."""
    monkeypatch.setattr(train_state, "zero_state", lambda opt: opt.state.clear())


@pytest.mark.parametrize("fault", [_counter_in_the_body, _rate_read_on_the_host, _step_counter_rebuilt,
                                   _momentum_rebuilt])
def test_the_replay_fails_where_a_fault_is_planted(monkeypatch, gpu_arithmetic, fault):
    """Each fault passes where Python runs every step (the eager step, and the
    re-running stand-in); the replay that runs no Python differs. With the
    self-test on, a fault visible at the capture fails the capture instead."""
    fault(monkeypatch)
    eager = seed_runs("static", (0,), ReplayingRecorder())
    replayed = seed_runs("static", (0,), AtenRecorder(), self_test=False)
    assert replayed.losses != eager.losses or same_weights(replayed.weights, eager.weights)
    # frozen at the capture: the self-test sees it
    if fault in (_counter_in_the_body, _rate_read_on_the_host):
        tested = seed_runs("static", (0,), AtenRecorder())
        assert "self-test" in tested.records[0]["capture_failed"]
        if fault is _rate_read_on_the_host:  # the eager body took over (the counter's count differs)
            assert tested.losses == eager.losses


class FailingRecorder:
    """A capture that fails as CUDA's do (an operation refused mid-capture)."""

    def __call__(self, body):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore detail")


def test_a_failed_capture_falls_back_to_the_eager_body_and_says_why(monkeypatch):
    eager = seed_runs("off", (0, 1))
    got = seed_runs("static", (0, 1), FailingRecorder())
    assert got.losses == eager.losses and same_weights(got.weights, eager.weights) == []
    record = got.records[0]
    assert not record["captured"] and record["graphs"] == []
    assert record["capture_failed"] == ("24px/whiten-bias: RuntimeError: CUDA error: operation not "
                                        "permitted when stream is capturing")
    assert record["eager_why"] == ["capture failed: " + record["capture_failed"]]
    assert step_line(record) == "step: eager, capture failed: " + record["capture_failed"]


def test_the_step_needs_no_host_work_at_the_dispatcher(gpu_arithmetic):
    """Every ATen op of the static step (forward, backward, both optimisers
    with Muon's banks batched, as on a GPU) is free of host reads, data-sized
    results and host tensors; the trap catches each kind when planted."""
    bodies = []

    def trapped(task):
        for opt in task.optimizers:
            if hasattr(opt, "batch_banks"):
                opt.batch_banks = True
        stepper = task.state.stepper
        for epoch in range(len(task.epoch_steps)):
            for key, in task.epoch_batches(epoch):
                stepper.static.load(key)
                variant = cifar_step.StepVariant(key.side, task.whiten_bias_grad())
                with no_host_ops():
                    bodies.append(stepper.body(variant))
                task.step += 1

    seed_runs("static", (0,), after_init=trapped)
    assert len(bodies) == 4 and all(torch.isfinite(b) for b in bodies)
    planted = (lambda t: t.sum().item(), lambda t: t.nonzero(), lambda t: t[t > 0], lambda t: torch.unique(t),
               lambda t: torch.tensor([1.0]) + t, lambda t: bool(t.sum() > 0), lambda t: torch.equal(t, t))
    for plant in planted:
        with no_host_ops(), pytest.raises(HostOp):
            plant(torch.randn(5))


def _compiled_seeds(monkeypatch) -> list[list[float]]:
    """The warm-up and two seeds, the step's forward compiled whole-graph by
    aot_eager (AOTAutograd's forward and backward, no code generation), the
    seeds under ``error_on_recompile``."""
    from dawnbench_fast.execution import gpu_defaults

    monkeypatch.setattr(gpu_defaults, "COMPILE_BACKEND", "aot_eager")
    monkeypatch.setattr(gpu_defaults, "_COMPILED", {})
    torch._dynamo.reset()
    with contextlib.ExitStack() as after_warm_up:
        def no_recompile(task):
            if not after_warm_up._exit_callbacks:
                after_warm_up.enter_context(gpu_defaults.no_recompile())

        try:
            return seed_runs("static", (0, 1), compile="on", after_init=no_recompile).losses
        finally:
            torch._dynamo.reset()


def test_the_compiled_step_never_recompiles_after_the_warm_up(monkeypatch):
    losses = _compiled_seeds(monkeypatch)
    assert [len(x) for x in losses] == [4, 4] and losses[0] != losses[1]


def test_a_recompile_after_the_warm_up_is_an_error(monkeypatch):
    """The planted fault: the forward given a Python value that changes from
    step to step (a recompilation for each new value)."""
    real = cifar_step.forward_loss
    steps = [0]

    def forward_loss(model, x, y, whiten_bias_grad, precision, label_smoothing, per_example=False):
        steps[0] += 1
        return real(model, x, y, whiten_bias_grad, precision, label_smoothing + steps[0] * 1e-6, per_example)

    monkeypatch.setattr(cifar_step, "forward_loss", forward_loss)
    with pytest.raises(Exception, match="[Rr]ecompil"):
        _compiled_seeds(monkeypatch)


class FakeCuda:
    """torch.cuda as CudaRecorder uses it, recording each call in order:
    streams, the stream context, graphs and the capture context."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.default = self.current = self.Stream()

    def graph_pool_handle(self):
        return "pool"

    def Stream(self):  # noqa: N802 - torch.cuda's name
        cuda = self

        class Stream:
            def wait_stream(self, other):
                cuda.calls.append(("wait", self, other))

        return Stream()

    def current_stream(self):
        return self.current

    @contextlib.contextmanager
    def stream(self, s):
        before, self.current = self.current, s
        self.calls.append(("enter stream", s))
        yield
        self.calls.append(("exit stream", s))
        self.current = before

    def CUDAGraph(self):  # noqa: N802
        cuda = self

        class Graph:
            def replay(self):
                cuda.calls.append(("replay",))

        return Graph()

    @contextlib.contextmanager
    def graph(self, g, pool=None, stream=None):
        before, self.current = self.current, stream
        self.calls.append(("capture", g, pool, stream))
        yield
        self.calls.append(("end capture", g))
        self.current = before


def test_cuda_recorder_warms_up_and_captures_on_one_stream():
    cuda = FakeCuda()
    recorder = cifar_step.CudaRecorder(cuda)
    seen = []

    def body():
        seen.append((cuda.current, torch._dynamo.config.error_on_recompile))
        return torch.zeros(())

    graph, out = recorder(body)
    s = recorder.stream
    # two warm-ups, then the capture, all on the recorder's one stream; a recompile errs in the capture only
    assert seen == [(s, False), (s, False), (s, True)]
    assert [c[0] for c in cuda.calls] == ["wait", "enter stream", "exit stream", "capture", "end capture",
                                          "wait"]
    assert cuda.calls[0][1:] == (s, cuda.default)  # the stream waits for the work queued before
    assert cuda.calls[3][1:] == (graph, "pool", s)  # captured into the shared pool, on the warm-up's stream
    assert cuda.calls[5][1:] == (cuda.default, s)  # the default stream waits for the capture's stream
    assert torch._dynamo.config.error_on_recompile is False and out.shape == ()
    recorder(body)  # a second variant: the same stream and pool
    assert cuda.calls[-3][2:] == ("pool", s) and len(seen) == 6
