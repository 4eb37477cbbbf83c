"""dawnbench_fast.execution.distributed's pieces in one process: the shares of a batch
and of a test set, the one-process world (every collective a no-op), the
CPU synchronised BatchNorm outside a process group. The two-process runs are
tests/execution/test_distributed_cifar.py and tests/execution/test_distributed_imagenet.py."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.execution import distributed
from dawnbench_fast.execution.distributed import SyncBatchNorm, World, convert_sync_batchnorm


@pytest.mark.parametrize("n, size", [(10, 3), (2000, 2), (7, 8), (0, 2)])
def test_shards_cover_the_test_set_once_in_order(n, size):
    shards = [World(rank=r, size=size).shard(n) for r in range(size)]
    assert [i for s in shards for i in range(n)[s]] == list(range(n))
    assert max(s.stop - s.start for s in shards) - min(s.stop - s.start for s in shards) <= 1


def test_batch_shares_are_contiguous_and_equal():
    assert [World(rank=r, size=4).batch_share(500 * 4) for r in range(4)] == \
        [slice(500 * r, 500 * (r + 1)) for r in range(4)]
    with pytest.raises(ConfigError, match="--batch-size 1000: must divide by the 3 processes"):
        World(rank=0, size=3).batch_share(1000)


def test_one_process_is_untouched(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    w, device = distributed.init_from_env(torch.device("cpu"))
    assert w == World() and w.main and not w.distributed and device == torch.device("cpu")
    assert w.record() == {"world_size": 1, "processes_per_node": 1, "nodes": 1, "backend": None,
                          "launcher": None, "written_by_rank": 0}
    loss = torch.tensor(3.5)
    assert w.sum_float(loss) is loss and w.sum_counts([1, 2]) == [1, 2]
    net = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    net(torch.randn(4, 3)).sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    distributed.allreduce_grads(net.parameters(), w)
    distributed.average_bn_statistics(net, w)
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, net.parameters(), strict=True))


def test_sync_batchnorm_is_batchnorm_outside_a_process_group():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    net[1].weight.data.uniform_(0.5, 1.5)
    net[1].running_mean.fill_(0.25)
    synced = convert_sync_batchnorm(copy.deepcopy(net), torch.device("cpu"))
    assert isinstance(synced[1], SyncBatchNorm) and torch.equal(synced[1].weight, net[1].weight)
    assert torch.equal(synced[1].running_mean, net[1].running_mean)
    x = torch.randn(5, 3, 6, 6)
    torch.testing.assert_close(synced(x), net(x))  # training mode: batch statistics
    torch.testing.assert_close(synced[1].running_var, net[1].running_var)
    synced.eval(), net.eval()
    torch.testing.assert_close(synced(x), net(x))


@pytest.mark.parametrize("outcome", ["returns", "user error", "interrupt"])
def test_ranks_meet_at_a_barrier_before_leaving_only_after_a_normal_end(monkeypatch, outcome):
    """guarded() leaves the process group whatever happened; only a command
    that ended normally first waits for the other ranks (after an error they
    may never arrive, and a barrier would hang)."""
    from dawnbench_fast.runner import cli

    calls: list[str] = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: calls.append("destroy"))

    def command() -> int:
        calls.append("command")
        if outcome == "user error":
            raise ConfigError("--epochs: must be > 0")
        if outcome == "interrupt":
            raise KeyboardInterrupt
        return 0

    code = cli.guarded("prog", command)
    assert code == {"returns": 0, "user error": 2, "interrupt": 130}[outcome]
    assert calls == (["command", "barrier", "destroy"] if outcome == "returns" else ["command", "destroy"])
    assert distributed.world() == World()


def test_a_failed_runs_message_keeps_the_fault_handlers_stacks():
    """A rank's abort prints every thread's stack, then the extension modules,
    then torchrun's report: the message keeps each stack whole however long
    the output after it, and stderr's tail as before."""
    from support.dist_driver import failure_output

    stacks = ("Fatal Python error: Aborted\n\nThread 0x01 (most recent call first):\n"
              '  File "loader.py", line 7 in decode\n\n'
              "Current thread 0x02 (most recent call first):\n  <no Python frame>\n\n")
    modules = "Extension modules: " + ", ".join(f"mod{i}" for i in range(400)) + "\n"
    stderr = "warm-up\n" + stacks + modules + "torchrun: rank 1 failed\n" * 300
    shown = failure_output("report\n", stderr)
    assert stacks in shown and 'line 7 in decode' in shown
    assert "mod399" not in shown.split("--- the fault handler ---")[1]  # the module list left out
    assert shown.startswith("report\n") and shown.count("torchrun: rank 1 failed") >= 100
    two = failure_output("", stacks + modules + stacks.replace("0x01", "0x03") + modules)
    assert two.count("--- the fault handler ---") == 2 and "Thread 0x03" in two
    assert failure_output("out", "plain error") == "outplain error"
