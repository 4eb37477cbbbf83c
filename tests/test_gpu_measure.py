"""The prepared measuring script (``python -m dawnbench_fast.gpu_suite.measure``,
issue 45), on the CPU: its dry run goes through every stage (build, the
published script's stand-in with our trainer, the profile) with a carried
stamp and a carried cache, and leaves in the copy-back folder the files a
lent machine would return, within its limits (at most 8 files, none over 16
MiB, none in a folder, plain names); without a stamp it refuses before any
work; a stage with no time left is skipped, not started; a file too big to
come back is made smaller or left out, and said so."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast.gpu_suite import carry, measure
from dawnbench_fast.reporting import provenance

ROOT = Path(__file__).resolve().parents[1]
MEASURE = [sys.executable, "-m", "dawnbench_fast.gpu_suite.measure"]
RETURNED_NAME = re.compile(r"^[A-Za-z0-9._-]+$")  # the only names a lent machine sends back


def _tar_with(path: Path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _names(tarball: Path) -> list[str]:
    with tarfile.open(tarball) as tar:
        return tar.getnames()


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("measure")
    stamp = base / "source.json"  # as carried in .gpu/kit
    stamp.write_text(json.dumps(provenance.make_stamp()))
    carried = base / "cache"  # the last run's caches, named for this machine (the dry run's: cpu)
    carried.mkdir()
    name = carry.cache_name(None, torch.__version__)
    _tar_with(carried / name, {"inductor/fxgraph/marker": b"from the last run"})
    out = base / "OUT"
    r = subprocess.run([*MEASURE, "--work", str(base / "w"), "--copy-to", str(out), "--dry-run",
                        "--data-dir", str(cifar_dir()), "--stamp", str(stamp), "--cache-from", str(carried)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return {"work": base / "w", "out": out, "stdout": r.stdout, "stamp": json.loads(stamp.read_text()),
            "cache": name, "suite": json.loads((out / "suite.json").read_text())}


def test_every_stage_ran_and_wrote_its_part(dry_run):
    suite = dry_run["suite"]
    stages = {s["stage"]: s for s in suite["measure"]["stages"]}
    assert list(stages) == ["build", "peer", "profile"]
    assert {k: s["status"] for k, s in stages.items()} == {"build": "skipped", "peer": "done",
                                                           "profile": "done"}
    parts = suite["parts"]
    assert parts["build"]["before"]["extension"] in (True, False)  # probed only, in a dry run
    (block,) = parts["peer"]["blocks"]  # a dry run's one block, the published script first
    assert block["order"] == ["peer", "ours"] and block["peer"]["runs"] and block["ours"]["runs"]
    assert parts["roofline"]["status"] == "done" and parts["roofline"]["ncu"]["status"] == "skipped"
    (warm,) = suite["measure"]["warmups"]
    assert warm["peer_warmup_s"] > 0 and warm["ours_warmup_s"] > 0  # what says whether the caches helped
    assert "caches restored: True" in dry_run["stdout"]  # the closing table


def test_the_stamped_commit_is_recorded_everywhere(dry_run):
    stamp, suite = dry_run["stamp"], dry_run["suite"]
    assert suite["measure"]["git"]["sha"] == stamp["commit"] and suite["measure"]["git"]["source"] == "stamp"
    assert suite["environment"]["git"]["sha"] == stamp["commit"]
    runs = tarfile.open(dry_run["out"] / "runs.tar.gz")
    (member,) = [m for m in runs.getnames() if m.endswith("run.json")]
    assert json.load(runs.extractfile(member))["git"]["sha"] == stamp["commit"]


def test_the_carried_cache_is_restored_and_sent_back(dry_run):
    cache = dry_run["suite"]["measure"]["cache"]
    assert cache["restored"] is True and cache["name"] == dry_run["cache"]
    restored = dry_run["work"] / "cache" / "inductor" / "fxgraph" / "marker"
    assert restored.read_bytes() == b"from the last run"
    assert "inductor/fxgraph/marker" in _names(dry_run["out"] / dry_run["cache"])  # carried on next time


def test_the_returned_files_keep_within_the_limits(dry_run):
    out = dry_run["out"]
    files = sorted(out.iterdir())
    assert {p.name for p in files} == {"suite.json", "suite.log", "logs.tar.gz", "runs.tar.gz",
                                       "profile.tar.gz", dry_run["cache"]}
    assert len(files) <= carry.MAX_FILES and all(p.is_file() for p in files)  # nothing in a folder
    assert all(p.stat().st_size <= carry.MAX_FILE_BYTES and RETURNED_NAME.match(p.name) for p in files)
    assert "logs/measure_peer.log" in _names(out / "logs.tar.gz")
    assert any(n.endswith("profile/report.json") for n in _names(out / "profile.tar.gz"))
    assert not [n for n in _names(out / "runs.tar.gz") if n.endswith(".pt")]  # no checkpoints
    returned = dry_run["suite"]["measure"]["returned"]
    assert set(returned) == {p.name for p in files}
    assert "[measure]" in (out / "suite.log").read_text()


def test_without_a_stamp_it_refuses_before_any_work(tmp_path):
    r = subprocess.run([*MEASURE, "--work", str(tmp_path / "w"), "--dry-run", "--stamp",
                        str(tmp_path / "none")], capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env={k: v for k, v in os.environ.items() if k != provenance.STAMP_ENV})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "provenance stamp" in lines[0], r.stderr
    assert not (tmp_path / "w").exists()


def test_a_stage_with_no_time_left_is_skipped_not_started(tmp_path):
    args = measure.parser().parse_args(["--work", str(tmp_path), "--dry-run", "--no-stamp", "--limit", "30"])
    m = measure.Measure(tmp_path, args.limit)
    entry = measure.run_stage(m, args, "peer")
    assert entry["status"] == "skipped" and "left of --limit" in entry["reason"]
    assert not (tmp_path / "logs").exists()  # nothing was started
    assert json.loads((tmp_path / "suite.json").read_text())["measure"]["stages"] == [entry]


def test_the_stage_commands_are_the_suites_parts(tmp_path):
    args = measure.parser().parse_args(["--work", str(tmp_path), "--peer", "p.py", "--data-dir", "d",
                                        "--trainer-args", "--kernels", "triton"])
    peer = measure.suite_command(args, "peer", 300)
    assert peer[peer.index("--only") + 1] == "peer" and "--peer-first" in peer
    assert peer[peer.index("--peer-runs") + 1] == "10"
    assert peer[-3:] == ["--trainer-args", "--kernels", "triton"]
    profile = measure.suite_command(args, "profile", 60)
    assert profile[profile.index("--only") + 1] == "roofline" and "--ncu-kernels" in profile
    build = measure.suite_command(args, "build", 150)
    assert build[build.index("--only") + 1] == "build" and "--data-dir" not in build


def test_a_file_too_big_to_come_back_is_made_smaller_or_left_out(tmp_path, monkeypatch):
    monkeypatch.setattr(carry, "MAX_FILE_BYTES", 2000)
    folder = tmp_path / "cache"
    (folder / "triton").mkdir(parents=True)
    (folder / "inductor").mkdir()
    noise = torch.randint(0, 255, (8000,), dtype=torch.uint8).numpy().tobytes()  # random: no compression
    (folder / "triton" / "kernel.cubin").write_bytes(noise)
    (folder / "inductor" / "graph.py").write_text("x = 1\n")
    rec = carry.send_cache(folder, tmp_path / "OUT", "c.tar.gz")
    assert rec["bytes"] <= 2000 and "triton" in rec["left_out"]
    assert _names(tmp_path / "OUT" / "c.tar.gz") == ["inductor/graph.py"]
    (folder / "inductor" / "big").write_bytes(noise)
    rec = carry.send_cache(folder, tmp_path / "OUT", "c.tar.gz")
    assert rec["bytes"] is None and "even at its smallest" in rec["reason"]
    assert not (tmp_path / "OUT" / "c.tar.gz").exists()


def test_cache_names_and_a_damaged_carry():
    assert carry.cache_name("NVIDIA H100 80GB HBM3", "2.11.0+cu130") == \
        "inductor-nvidia-h100-80gb-hbm3-torch2.11.0-cu130.tar.gz"
    assert RETURNED_NAME.match(carry.cache_name("NVIDIA H200", "2.13.0+cpu"))


def test_a_damaged_carried_cache_costs_a_cold_compile_not_the_run(tmp_path):
    (tmp_path / "c.tar.gz").write_bytes(b"not a tarball")
    rec = carry.restore_cache(tmp_path, "c.tar.gz", tmp_path / "into")
    assert rec["restored"] is False and "c.tar.gz" in rec["reason"]
    assert carry.restore_cache(tmp_path, "other.tar.gz", tmp_path / "into")["restored"] is False


def test_developers_md_calls_fit_the_device_tool_and_parse():
    """DEVELOPERS.md's device calls: each command within the tool's 2000
    characters, and each measuring command one the script's parser takes."""
    text = (ROOT / "DEVELOPERS.md").read_text()
    commands = [c.replace('\\"', '"') for c in re.findall(r'command="((?:[^"\\]|\\.)*)"', text)]
    assert len(commands) >= 4 and all(len(c) <= 2000 for c in commands)
    measured = [c.split("python3 -m dawnbench_fast.gpu_suite.measure", 1)[1] for c in commands
                if "gpu_suite.measure" in c]
    assert len(measured) == 2  # the build while the data travels, then the measurement
    for rest in measured:
        args = measure.parser().parse_args(shlex.split(rest.replace('"$OUT"', "OUT")))
        assert args.work and args.copy_to == "OUT"
