"""The prepared measuring script (``python -m tools.gpu_suite.measure``)
on the CPU: its dry run goes through every stage (build, our trainer then the
published script's stand-in, the profile) with a carried stamp and a
carried cache, and leaves in the copy-back folder the files the command
runner would return, within its limits (at most 8 files, none over 16 MiB,
none in a folder, plain names), with the ratio and both sides' accuracies;
where our side fails before writing a run.json the published script's
figures still come back and ours is run again with capture off; the
background warm-up leaves a marker per compile mode; without a stamp it
refuses before any work; a stage with no time left is skipped, not
started; a file too big to come back is made smaller or left out, and said
so; the procedure's commands in docs/GPU_SUITE.md parse."""

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

from dawnbench_fast.csrc import native
from dawnbench_fast.reporting import provenance
from tools.gpu_suite import background, carry, measure
from tools.gpu_suite.record import comma_list

ROOT = Path(__file__).resolve().parents[2]
MEASURE = [sys.executable, "-m", "tools.gpu_suite.measure"]
RETURNED_NAME = re.compile(r"^[A-Za-z0-9._-]+$")  # the only names the command runner sends back


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


@pytest.mark.e2e
def test_every_stage_ran_and_wrote_its_part(dry_run):
    suite = dry_run["suite"]
    stages = {s["stage"]: s for s in suite["measure"]["stages"]}
    assert list(stages) == ["build", "peer", "profile"]
    assert {k: s["status"] for k, s in stages.items()} == {"build": "skipped", "peer": "done",
                                                           "profile": "done"}
    parts = suite["parts"]
    # probed only, in a dry run: what this interpreter finds (the probe runs the same Python)
    reason = native.unavailable_reason()
    assert parts["build"]["before"]["extension"] is (reason is None)
    assert parts["build"]["before"]["reason"] == reason
    (block,) = parts["peer"]["blocks"]  # a dry run's one block, ours first
    assert block["order"] == ["ours", "peer"] and block["peer"]["runs"] and block["ours"]["runs"]
    assert parts["roofline"]["status"] == "done" and parts["roofline"]["ncu"]["status"] == "skipped"
    (warm,) = suite["measure"]["warmups"]
    assert warm["peer_warmup_s"] > 0 and warm["ours_warmup_s"] > 0  # what says whether the caches helped
    assert "caches restored: True" in dry_run["stdout"]  # the closing table
    ratio = suite["measure"]["ratio"]  # the dry run's accuracy is a few steps' worth: below the bar
    assert ratio["ratio_end_clock"] > 0 and ratio["valid"] is False and "below 94.00%" in ratio["invalid_why"]
    assert ratio["ours"]["mean_top1"] is not None and ratio["peer"]["mean_tta_val_acc"] is not None
    table = dry_run["stdout"][dry_run["stdout"].rindex("commit "):]
    assert "RATIO ours/peer end clock" in table and "INVALID" in table
    assert "ours: mean top-1" in table and "peer: mean tta_val_acc" in table and "reached" in table
    compiled = suite["measure"]["compile"]  # the carried caches hold no markers: made by our runs before
    assert compiled["mode"] == "max-autotune-no-cudagraphs" and "restored caches" in compiled["why"]
    marker = dry_run["work"] / "cache" / "warmed" / "max-autotune-no-cudagraphs.json"
    assert json.loads(marker.read_text())["by"] == "our runs in the peer stage"  # carried on with the caches


@pytest.mark.e2e
def test_the_peer_part_reads_both_sides_from_their_runs(dry_run):
    """The suite's peer part (its stage here): ours from its run.json, the
    published script's stand-in from its printed table, their ratio."""
    peer = dry_run["suite"]["parts"]["peer"]
    (block,) = peer["blocks"]
    assert peer["standin"] is True
    (ours,) = block["ours"]["runs"]
    written = json.loads(Path(ours["run_json"]).read_text())["result"]
    assert ours["end_clock_s"] == written["end_clock_seconds"] > 0
    (peer_run,) = block["peer"]["runs"]
    assert peer_run["run"] == "0" and 0.0 < peer_run["tta_val_acc"] < 1.0  # a real (if poor) accuracy
    assert peer["summary"]["ratio_end_clock"] == pytest.approx(ours["end_clock_s"] / peer_run["time_seconds"])
    work = Path(peer["workdir"]) / "cifar10"
    assert (work / "train.pt").is_file() and (work / "test.pt").is_file()


@pytest.mark.e2e
def test_the_roofline_part_summarises_the_profiled_step(dry_run):
    roof = dry_run["suite"]["parts"]["roofline"]
    assert Path(roof["report_dir"], "report.html").is_file()
    assert roof["top_ops"] and roof["totals"]["flops_per_step"] > 0
    assert roof["ncu"] == {"status": "skipped", "reason": "dry run"}


@pytest.mark.e2e
def test_the_stamped_commit_is_recorded_everywhere(dry_run):
    stamp, suite = dry_run["stamp"], dry_run["suite"]
    assert suite["measure"]["git"]["sha"] == stamp["commit"] and suite["measure"]["git"]["source"] == "stamp"
    assert suite["environment"]["git"]["sha"] == stamp["commit"]
    runs = tarfile.open(dry_run["out"] / "runs.tar.gz")
    (member,) = [m for m in runs.getnames() if m.endswith("run.json")]
    assert json.load(runs.extractfile(member))["git"]["sha"] == stamp["commit"]


@pytest.mark.e2e
def test_the_carried_cache_is_restored_and_sent_back(dry_run):
    cache = dry_run["suite"]["measure"]["cache"]
    assert cache["restored"] is True and cache["name"] == dry_run["cache"]
    restored = dry_run["work"] / "cache" / "inductor" / "fxgraph" / "marker"
    assert restored.read_bytes() == b"from the last run"
    assert "inductor/fxgraph/marker" in _names(dry_run["out"] / dry_run["cache"])  # carried on next time


@pytest.mark.e2e
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
    assert peer[peer.index("--only") + 1] == "peer" and "--peer-first" not in peer  # ours first
    assert int(peer[peer.index("--peer-runs") + 1]) >= 5
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


def test_the_procedures_commands_parse():
    """docs/GPU_SUITE.md's measuring procedure: each measuring command one the
    script's parser takes, the background one with the warm stage."""
    text = (ROOT / "docs" / "GPU_SUITE.md").read_text()
    section = text[text.index("## The measuring procedure"):]
    commands = re.findall(r"python3 -m tools\.gpu_suite\.measure([^\n`&>]*)", section)
    assert len(commands) >= 2
    stages = []
    for rest in commands:
        args = measure.parser().parse_args(shlex.split(rest.replace('"$OUT"', "OUT")))
        stages.append(",".join(comma_list(args.stages, measure.STAGES, "--stages", "stages")))
        assert args.work and len(rest) < 2000  # a command line the runner takes
    assert "build,warm" in stages and any("peer" in s for s in stages)


@pytest.mark.e2e
def test_a_failing_side_of_ours_still_returns_the_peers_figures_and_a_retry(tmp_path, monkeypatch):
    """Our trainer planted to exit 2 before writing a run.json (a config field
    that does not exist) unless capture is off: the published script's
    stand-in still runs and its figures come back, ours is run again with
    --set capture=off (the retry), and the profile after it gets capture=off too."""
    for key in (provenance.STAMP_ENV, "CUDA_VISIBLE_DEVICES", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.setenv(key, "")  # main() sets them for its commands; restored afterwards
    planted = ["--set", "no_such_field=1"]

    def run(m, cmd, log_name, timeout):
        if "capture=off" in cmd:  # the fault is one that capture=off avoids
            i = cmd.index(planted[1])
            cmd = cmd[:i - 1] + cmd[i + 1:]
        if cmd[cmd.index("--only") + 1] == "roofline":  # the profile: its command is what is checked here
            return 0, 0.0, m.out / "logs" / log_name  # (the whole dry run above runs one)
        return measure.run_logged(m, cmd, log_name, timeout)

    out = tmp_path / "OUT"
    rc = measure.main(["--work", str(tmp_path / "w"), "--copy-to", str(out), "--dry-run", "--no-stamp",
                       "--stages", "peer,profile", "--data-dir", str(cifar_dir()),
                       "--trainer-args", *planted], run=run)
    suite = json.loads((out / "suite.json").read_text())
    rec = suite["measure"]
    (block,) = suite["parts"]["peer"]["blocks"]
    assert block["ours"]["exit_status"] == 2 and block["ours"]["runs"] == []
    assert block["peer"]["exit_status"] == 0 and block["peer"]["runs"]  # the published script's figures
    assert rec["capture"]["off"] and "before writing a run.json" in rec["capture"]["why"][0]
    assert rec["retry"]["status"] == "done" and rec["retry"]["runs"] == 1
    stages = {s["stage"]: s for s in rec["stages"]}
    assert stages["retry"]["trainer_args"][-2:] == ["--set", "capture=off"]
    assert stages["profile"]["trainer_args"][-2:] == ["--set", "capture=off"]
    assert rec["ratio"]["source"] == "retry with --set capture=off" and rec["ratio"]["ratio_end_clock"] > 0
    logs = _names(out / "logs.tar.gz")
    assert "logs/peer_ours_block0.log" in logs and "logs/trainer.log" in logs
    assert rc == 1  # the peer stage was partial: said by the exit status, the figures kept


@pytest.mark.e2e
def test_the_background_warm_up_leaves_a_marker_per_mode(tmp_path, monkeypatch):
    for key in ("CUDA_VISIBLE_DEVICES", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.setenv(key, "")
    work = tmp_path / "w"
    assert measure.main(["--work", str(work), "--dry-run", "--no-stamp", "--stages", "warm"]) == 0
    (warm,) = json.loads((work / "suite.json").read_text())["measure"]["stages"]
    assert [m["mode"] for m in warm["modes"]] == ["default", "max-autotune-no-cudagraphs"]
    assert {m["status"] for m in warm["modes"]} == {"done"}
    for mode in ("default", "max-autotune-no-cudagraphs"):
        marker = json.loads(background.marker_path(work / "cache", mode).read_text())
        assert marker["mode"] == mode and marker["warmup_s"] > 0 and marker["capture_failed"] is None
    assert "ended" in json.loads((work / background.BACKGROUND).read_text())
    # what the measuring command then finds: nothing running, both modes warm, no wait
    rec = background.await_background(work, 60, background.SystemClock())
    assert rec["ended"] == "had ended" and rec["waited_s"] < 5 and len(rec["modes_warmed"]) == 2
