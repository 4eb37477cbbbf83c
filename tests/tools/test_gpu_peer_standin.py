"""The published script's stand-in (gpu_suite/peer_standin.py), which the
GPU suite's dry run starts as a script of its own: on a few images here, its
console table is what the suite's parser reads, the warm-up kept apart from
the timed runs, each accuracy a real one."""

from __future__ import annotations

import torch

from tools.gpu_suite import peer_io, peer_standin


def test_the_standin_s_table_is_what_the_suite_parses(tmp_path, monkeypatch, capsys):
    (tmp_path / "cifar10").mkdir()
    gen = torch.Generator().manual_seed(0)
    for name, n in (("train", 40), ("test", 20)):
        labels = torch.arange(n) % 10
        noise = torch.rand(n, 32, 32, 3, generator=gen) * 64
        images = (noise + 19 * labels[:, None, None, None]).to(torch.uint8)
        torch.save({"images": images, "labels": labels}, tmp_path / "cifar10" / f"{name}.pt")
    monkeypatch.chdir(tmp_path)  # the script reads cifar10/ under its working directory
    monkeypatch.setenv("AIRBENCH_RUNS", "2")
    peer_standin.main()
    parsed = peer_io.parse_output(capsys.readouterr().out)
    assert [r["run"] for r in parsed["runs"]] == ["0", "1"] and parsed["warmup"]["run"] == "warmup"
    # each class's images sit apart: the nearest class mean finds them all
    assert all(r["tta_val_acc"] == 1.0 and r["time_seconds"] >= 0 for r in parsed["runs"])
    assert parsed["mean_line"].startswith("Mean: 1.0000")
