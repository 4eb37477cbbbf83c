"""The GPU suite (``python -m tools.gpu_suite``): its dry run goes through
its parts on the CPU (build, trainer and ops here; peer and roofline in the
measuring script's dry run, tests/tools/test_gpu_measure.py, which runs them
through this suite) and leaves a suite.json a reader can use; a part cut at
its budget keeps what it measured; the published script's table is parsed as
it prints it; bad flags are one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast import dispatch
from dawnbench_fast.reporting import provenance
from tools.gpu_suite import peer_io as gpu_suite_peer
from tools.gpu_suite import suite as gpu_suite
from tools.gpu_suite.record import Suite
from tools.gpu_suite.roofline_part import kernel_pattern

ROOT = Path(__file__).resolve().parents[2]


def suite(*args: str, timeout: float = 240, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.gpu_suite", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env={**os.environ, **(env or {})})


DRY_PARTS = ("build", "trainer", "ops")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("suite")
    stamp = out.parent / f"{out.name}-source.json"  # as on a GPU machine: the carried checkout's stamp
    stamp.write_text(json.dumps(provenance.make_stamp()))
    # the peer and roofline parts run in the measuring script's dry run
    # (tests/tools/test_gpu_measure.py), through this same suite: not twice
    r = suite("--out", str(out), "--dry-run", "--only", ",".join(DRY_PARTS), "--data-dir", str(cifar_dir()),
              env={provenance.STAMP_ENV: str(stamp)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return {"out": out, "json": json.loads((out / "suite.json").read_text()), "stdout": r.stdout,
            "stamp": json.loads(stamp.read_text())}


@pytest.mark.e2e
def test_dry_run_goes_through_its_parts(dry_run):
    d = dry_run["json"]
    assert d["schema_version"] == 1
    assert {k: v["status"] for k, v in d["parts"].items()} == {
        "build": "skipped", "trainer": "done", "ops": "done"}
    assert all(p["dry_run"] for p in d["parts"].values())
    env = d["environment"]
    assert env["gpu"]["present"] is False and env["torch"] and env["nvtx_imports"] in (True, False)
    assert d["parts"]["build"]["before"]["extension"] in (True, False)
    assert (dry_run["out"] / "suite.log").read_text().count("started") == len(DRY_PARTS)


@pytest.mark.e2e
def test_the_suite_and_its_runs_name_the_stamped_commit(dry_run):
    """The GPU machine's .git may be stale; the carried stamp decides."""
    stamp = dry_run["stamp"]
    want = {"sha": stamp["commit"], "dirty": bool(stamp["changed_at_stamp"]), "source": "stamp"}
    got = dry_run["json"]["environment"]["git"]
    assert {k: got[k] for k in want} == want and got["files_checked"] == len(stamp["files"])
    (run,) = dry_run["json"]["parts"]["trainer"]["runs"]
    ran = json.loads(Path(run["run_json"]).read_text())["git"]
    assert {k: ran[k] for k in want} == want


@pytest.mark.e2e
def test_trainer_records_come_from_the_runs(dry_run):
    d = dry_run["json"]["parts"]
    (run,) = d["trainer"]["runs"]
    written = json.loads(Path(run["run_json"]).read_text())["result"]
    assert run["final_top1"] == written["final_top1"] and 0.0 <= run["final_top1"] <= 1.0
    assert run["end_clock_s"] == written["end_clock_seconds"] > 0 and run["warmup_s"] > 0
    assert d["trainer"]["summary"]["runs"] == 1


@pytest.mark.e2e
def test_every_catalogued_op_has_its_faces_and_agrees_with_torch(dry_run):
    cases = dry_run["json"]["parts"]["ops"]["cases"]
    assert {c["op"] for c in cases} == set(dispatch.CATALOGUE)
    for c in cases:
        if c["impl"] == "torch" or c["impl"].startswith("torch.compile"):
            assert c["status"] == "ok", c
        if c["status"] == "ok" and c["impl"] != "torch":
            assert c["rel_err_vs_torch"] is not None and c["rel_err_vs_torch"] < 0.05, c  # bf16
        if c["status"] == "unavailable":
            assert c["reason"], c
    # a face that is not the op's own is never timed as if it were
    cpu_ns = [c for c in cases if c["op"] == "newton_schulz" and c["impl"] == "cpu"]
    assert cpu_ns and all(c["status"] == "unavailable" for c in cpu_ns)


@pytest.mark.e2e
def test_a_part_cut_at_its_budget_keeps_a_readable_record(tmp_path):
    r = suite("--out", str(tmp_path), "--dry-run", "--only", "trainer", "--part-budget", "2",
              "--data-dir", str(cifar_dir()), timeout=60)
    assert r.returncode == 0, r.stderr
    trainer = json.loads((tmp_path / "suite.json").read_text())["parts"]["trainer"]
    assert trainer["status"] == "stopped at the budget" and trainer["exit_status"] is None
    assert trainer["runs"] == [] and trainer["summary"]["runs"] == 0


def test_commands_with_one_out_fill_one_file(tmp_path):
    first = Suite(tmp_path, dry_run=True, budget_s=10)
    first.part("build")
    first.end("build", "skipped", "x")
    second = Suite(tmp_path, dry_run=True, budget_s=10)
    second.part("ops")
    data = json.loads((tmp_path / "suite.json").read_text())
    assert data["parts"]["build"]["status"] == "skipped" and data["parts"]["ops"]["status"] == "running"
    assert not list(tmp_path.glob("*.tmp"))  # written through a temporary name, then renamed


def test_missing_dependencies_names_the_uninstalled_requirements(monkeypatch):
    from importlib import metadata

    monkeypatch.setattr(metadata, "requires", lambda dist: [
        "torch>=2.5", "nvtx>=0.2", "nvidia-ml-py>=12.0", 'pytest>=8; extra == "dev"'])
    have = {"torch", "nvidia-ml-py"}

    def version(name):
        if name not in have:
            raise metadata.PackageNotFoundError(name)
        return "1"

    monkeypatch.setattr(metadata, "version", version)
    assert gpu_suite.missing_dependencies() == ["nvtx"]  # the extra's pytest is not required
    have.add("nvtx")
    assert gpu_suite.missing_dependencies() == []


def test_a_missing_dependency_fails_the_trainer_parts_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # main() sets it in a dry run; restored afterwards
    env = {"recorded": "now", "missing_dependencies": ["nvtx"]}
    monkeypatch.setattr(gpu_suite, "environment", lambda: env)
    assert gpu_suite.main(["--out", str(tmp_path), "--dry-run", "--only", "trainer,roofline"]) == 1
    parts = json.loads((tmp_path / "suite.json").read_text())["parts"]
    for name in ("trainer", "roofline"):
        assert parts[name]["status"] == "failed", parts[name]
        assert "nvtx" in parts[name]["reason"] and "pip install" in parts[name]["reason"]
        assert "runs" not in parts[name]  # the trainer was never started


def test_a_part_that_fails_before_opening_its_record_is_recorded(tmp_path, monkeypatch):
    # the ops part on a machine where the package is not installed yet died on
    # its first import, before its record existed: a KeyError hid the reason
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(gpu_suite, "environment", lambda: {"recorded": "now"})

    def dies(suite, args):
        raise ModuleNotFoundError("No module named 'dawnbench_fast.csrc'")

    monkeypatch.setitem(gpu_suite.RUNNERS, "ops", dies)
    assert gpu_suite.main(["--out", str(tmp_path), "--dry-run", "--only", "ops", "--ops", "bn_act"]) == 1
    rec = json.loads((tmp_path / "suite.json").read_text())["parts"]["ops"]
    assert rec["status"] == "failed" and "dawnbench_fast.csrc" in rec["reason"]


PUBLISHED_TABLE = """\
-----------------------------------------------------------------------------
|  run     |  epoch  |  train_acc  |  val_acc  |  tta_val_acc  |  time_seconds  |
-----------------------------------------------------------------------------
|  warmup  |      1  |     0.1020  |   0.0995  |               |        10.1000  |
|          |   eval  |     0.1020  |   0.0995  |       0.1001  |        10.9000  |
-----------------------------------------------------------------------------
|       0  |      1  |     0.5120  |   0.6011  |               |         0.3300  |
|          |      8  |     0.9544  |   0.9345  |               |         2.4500  |
|          |   eval  |     0.9544  |   0.9345  |       0.9412  |         2.5900  |
-----------------------------------------------------------------------------
|       1  |      1  |     0.5020  |   0.5987  |               |         0.3310  |
|          |   eval  |     0.9533  |   0.9330  |       0.9391  |         2.6000  |
-----------------------------------------------------------------------------
Mean: 0.9401    Std: 0.0015
/root/airbench/logs/0f/log.pt
"""


def test_the_published_scripts_table_is_parsed():
    parsed = gpu_suite_peer.parse_output(PUBLISHED_TABLE)
    assert parsed["runs"] == [{"run": "0", "tta_val_acc": 0.9412, "time_seconds": 2.59},
                              {"run": "1", "tta_val_acc": 0.9391, "time_seconds": 2.6}]
    assert parsed["warmup"]["time_seconds"] == 10.9  # compile: kept apart, never in the mean
    assert parsed["mean_line"].startswith("Mean: 0.9401")
    assert gpu_suite_peer.parse_output("Traceback ...\nRuntimeError: CUDA out of memory")["runs"] == []


def test_ncu_csv_and_kernel_patterns():
    log = 'training...\n==PROF== Connected\n"ID","Kernel Name","gpu__time_duration.sum"\n"","","nsecond"\n' \
          '"0","void cutlass::Kernel2<x>(y)","1,234"\nseed 0 done\n'
    csv = gpu_suite_peer.csv_part(log)
    assert csv.splitlines()[0].startswith('"ID"') and len(csv.splitlines()) == 3
    assert gpu_suite_peer.csv_part("no csv here") == ""
    assert kernel_pattern("void at::native::vectorized_elementwise_kernel<4, F>(int, F)") == \
        "vectorized_elementwise_kernel"
    assert kernel_pattern("triton_poi_fused_add_0") == "triton_poi_fused_add_0"


@pytest.mark.parametrize("args,needle", [
    (["--only", "trainer,bogus"], "--only"),
    (["--peer", "/no/such/airbench94_muon.py"], "--peer"),
    (["--only", "peer"], "--only peer needs --peer"),
    (["--data-dir", "/no/such/folder"], "--data-dir"),
    (["--seeds", "0"], "must be positive"),
    (["--ops", "bn_act,conv3d"], "conv3d not catalogued"),
])
def test_bad_flags_are_one_line_and_exit_2(tmp_path, args, needle):
    r = suite("--out", str(tmp_path / "o"), *args, timeout=60)
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()  # nothing written for a command refused


@pytest.mark.e2e
def test_the_ops_part_runs_the_ops_named(tmp_path):
    r = suite("--out", str(tmp_path), "--dry-run", "--only", "ops", "--ops", "bn_act,linear", timeout=120)
    assert r.returncode == 0, r.stderr
    cases = json.loads((tmp_path / "suite.json").read_text())["parts"]["ops"]["cases"]
    assert {c["op"] for c in cases} == {"bn_act", "linear"}
    # a second command with other ops keeps the first one's cases, and the
    # winners table covers both (no medians in a dry run: torch's, the reference)
    r = suite("--out", str(tmp_path), "--dry-run", "--only", "ops", "--ops", "matmul", timeout=120)
    assert r.returncode == 0, r.stderr
    cases = json.loads((tmp_path / "suite.json").read_text())["parts"]["ops"]["cases"]
    assert {c["op"] for c in cases} == {"bn_act", "linear", "matmul"}
    table = json.loads((tmp_path / "kernel_winners.json").read_text())
    rows = table["gpus"]["dry run (no GPU)"]["ops"]
    assert set(rows) == {"bn_act", "linear", "matmul"}
    assert {r["winner"] for r in rows.values()} == {"torch"}


def test_host_costs_time_every_piece_and_the_face_without_launches():
    """host_costs on the CPU (Triton's interpreter, one call a piece): every
    piece runs (a number, not an error line), bn_act's six launches each, and
    the Triton face with its launches skipped is timed beside it."""
    from dawnbench_fast.kernels import bn_act
    from tools.gpu_suite import ops as gpu_suite_ops

    out = gpu_suite_ops.host_costs(torch.device("cpu"), calls=1)
    errors = {k: v for k, v in out.items() if not isinstance(v, float)}
    assert not errors, errors
    launches = [k for k in out if k.startswith("Triton launch (")]
    assert len(launches) == 6
    assert "bn_act fwd+bwd, triton face, launches skipped" in out
    with gpu_suite_ops.launches_skipped(bn_act):
        assert isinstance(bn_act.affine_act_kernel, gpu_suite_ops._NoLaunch)
    assert not isinstance(bn_act.affine_act_kernel, gpu_suite_ops._NoLaunch)
