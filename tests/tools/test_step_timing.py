"""The in-step benchmark (tools/step_timing.py, tools/step_arms.py
and benchmarks/bench_in_step.py): its arms, its CPU dry run (the static step's
body timed eagerly at tiny shapes, two arms, the result file's structure),
its budget, and the captured step's kernel time by group from kernel names
(tools/step_kernels.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.cifar_data import cifar_dir
from support.recorders import ReplayingRecorder, graphs_recorded_by

from dawnbench_fast import dispatch
from dawnbench_fast.roofline.trace import Kernel, Trace
from tools import step_arms, step_kernels, step_timing

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")


def _cpu_reason() -> str | None:
    return dispatch.unavailable_reason("cpu", CPU)


def test_an_arm_switches_one_op_and_leaves_the_others_on_torch():
    assert step_arms.parse_arm("torch").whole == "torch"
    arm = step_arms.parse_arm("bn_act=cpu")
    assert arm.single_op() == ("bn_act", "cpu")
    assert step_arms.parse_arm("bn_act=triton+augment=cuda").single_op() is None
    for bad in ("fast", "pool=triton", "bn_act=auto", "bn_act=gpu"):
        with pytest.raises(ValueError, match="arm"):
            step_arms.parse_arm(bad)
    with pytest.raises(dispatch.KernelsUnavailable, match="bn_act=cuda"):
        step_arms.arm_backend(step_arms.parse_arm("bn_act=cuda"), CPU)
    if _cpu_reason() is not None:
        pytest.skip(f"--kernels cpu unavailable here: {_cpu_reason()}")
    with pytest.raises(dispatch.KernelsUnavailable, match="linear has no cpu face"):
        step_arms.arm_backend(step_arms.parse_arm("linear=cpu"), CPU)
    backend = step_arms.arm_backend(arm, CPU)
    assert isinstance(backend, dispatch.PerOpBackend)
    table = dispatch.op_table(backend)
    assert table["bn_act"]["backend"] == "cpu"
    assert {row["backend"] for op, row in table.items() if op != "bn_act"} == {"torch"}
    assert "bn_act=cpu" in table["bn_act"]["why"]
    assert "bn_act=cpu" in step_arms.default_arms(CPU)


def test_a_gpus_default_arms_are_torch_auto_then_each_face_one_op_at_a_time(monkeypatch):
    """The order docs/GPU_SUITE.md quotes (bn_act first: the op the in-step benchmark was built to settle),
    with every GPU face standing in as runnable."""
    real = dispatch.unavailable_reason
    monkeypatch.setattr(dispatch, "unavailable_reason",
                        lambda b, d: None if b in ("triton", "cuda") else real(b, d))
    assert step_arms.default_arms(torch.device("cuda")) == [
        "torch", "auto", "bn_act=triton", "bn_act=cuda", "augment=triton", "augment=cuda",
        "conv_group=triton", "linear=triton", "newton_schulz=triton"]


def _dry_run(out: Path, arms: str, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DAWNBENCH_DATA": str(cifar_dir())}
    env.pop("TRITON_INTERPRET", None)  # no Triton arm here
    return subprocess.run([sys.executable, "benchmarks/bench_in_step.py", "--device", "cpu", "--dry-run",
                           "--replays", "2", "--profile-replays", "1", "--arms", arms, "--out", str(out),
                           *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_the_cpu_dry_run_times_two_arms_and_writes_their_records(tmp_path):
    """The static step (capture=static: the captured step's body, eagerly)
    at tiny shapes; the second arm is bn_act's CPU face where the C++ build
    is here, else a second torch arm (the structure is what is checked)."""
    second = "bn_act=cpu" if _cpu_reason() is None else "torch"
    out = tmp_path / "in-step.json"
    r = _dry_run(out, f"torch,{second}", "--isolate", "none")
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["schema_version"] == 1 and result["kind"] == "in-step" and result["stopped"] is None
    assert result["planned"] == ["torch", second] and not result["isolated"]
    assert result["settings"]["dry_run"] and result["environment"]["device"] == "cpu"
    arms = result["arms"]
    assert [a["arm"] for a in arms] == ["torch", second] and {a["status"] for a in arms} == {"ok"}
    for a in arms:
        assert set(a["variants"]) == {"24px/frozen", "32px/frozen"}  # the run's two graphs
        for v in a["variants"].values():
            assert v["steps"] == 2 and 0 < v["p10"] <= v["median"] <= v["p90"]
        assert a["step_ms"]["median"] > 0 and a["run_train_ms"] > 0 and a["wall_s"] > 0
        assert a["timer"] == "host clock" and not a["captured"] and a["capture_s"] == 0
        assert a["kernel_time"] is None and "no device activity" in a["kernel_time_why"]
        assert 0 < a["first_loss"] < 1e3 and 0 < a["last_loss"] < 1e3
    assert arms[1]["ops"]["bn_act"] == ("cpu" if second != "torch" else "torch")
    # the same seed's first step on the same weights: bn_act's faces agree to float rounding
    assert arms[1]["first_loss"] == pytest.approx(arms[0]["first_loss"], rel=1e-4)
    assert "x torch's" in r.stdout
    # the result as the winners table reads it: a CPU face is no GPU's winner
    table = tmp_path / "winners.json"
    assert step_timing.main(["--winners-from", str(out), "--winners-out", str(table),
                             "--gpu-name", "Dry Run GPU"]) == 0
    entry = json.loads(table.read_text())["gpus"]["Dry Run GPU"]
    assert entry["in_step"]["arms"]["torch"] == arms[0]["step_ms"]["median"]
    assert not any(row.get("source") == "in-step" for row in entry["ops"].values())


@pytest.mark.e2e
def test_an_arm_in_a_process_of_its_own_and_one_that_cannot_run(tmp_path):
    """The GPU's path (each arm its own process), on the CPU; an arm whose
    face cannot run here is a record saying why, and the next arm still runs."""
    out = tmp_path / "in-step.json"
    r = _dry_run(out, "bn_act=cuda,torch", "--isolate", "process", "--profile-replays", "0")
    assert r.returncode == 0, r.stderr[-3000:]
    arms = json.loads(out.read_text())["arms"]
    assert arms[0]["status"] == "unavailable" and "CUDA" in arms[0]["reason"]
    assert arms[1]["status"] == "ok" and arms[1]["kernel_time_why"].startswith("not profiled")
    assert (tmp_path / "in-step.logs" / "torch.log").read_text().startswith("$ ")  # its process's output


def test_an_arm_running_at_the_budget_is_ended_and_said_so(tmp_path):
    out = tmp_path / "in-step.json"
    result = step_timing.time_in_step([], ["torch"], budget_s=1.5, device="cpu", dry_run=True,
                                      isolate="process", out=out)
    arm = result["arms"][0]
    assert arm["status"] == "stopped at the budget" and arm["wall_s"] < 30
    assert json.loads(out.read_text())["arms"][0]["status"] == "stopped at the budget"


def test_an_arm_replays_the_graphs_its_warm_up_captured(monkeypatch):
    """time_arm on a plan that captures (a GPU's, stood in on the CPU): the
    warm-up records one graph per variant, and every timed step replays one."""
    from dawnbench_fast.data.cifar10 import load_cifar10
    from dawnbench_fast.data.cifar10_device import place_data

    recorder = ReplayingRecorder()
    graphs_recorded_by(monkeypatch, recorder)  # the plan as a GPU's: captured, with its variants
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = step_timing.build_config("dawnbench_fast", [f"data_dir={cifar_dir()}", "download=false"],
                                       dry_run=True)
        data = place_data(load_cifar10(cfg.data_dir, False), cfg, CPU)
        rec = step_arms.time_arm(cfg, step_arms.parse_arm("torch"), data, CPU, replays=3, profile_replays=0)
    finally:
        torch.set_num_threads(before)
    assert rec["captured"] and recorder.recorded == 2  # 24 px and 32 px, frozen whitening bias
    # each graph once at its capture and twice in its self-test, then the first step, then 3 timed
    # replays of each variant
    assert recorder.replays == 2 * 3 + 1 + 2 * 3
    assert rec["variants"]["24px/frozen"]["median"] > 0 and rec["capture_s"] > 0


def test_the_budget_starts_no_arm_past_it(tmp_path):
    out = tmp_path / "in-step.json"
    result = step_timing.time_in_step([], ["torch", "auto"], budget_s=0, device="cpu", dry_run=True,
                                      isolate="process", out=out)
    assert result["stopped"] == "budget"
    assert [a["status"] for a in result["arms"]] == ["skipped", "skipped"]
    assert json.loads(out.read_text()) == result
    with pytest.raises(ValueError, match="arm"):
        step_timing.time_in_step([], ["nope"], device="cpu", dry_run=True, isolate="process")
    with pytest.raises(ValueError, match="replays"):
        step_timing.time_in_step([], ["torch"], replays=0, device="cpu", dry_run=True, isolate="process")


def test_the_summary_gives_each_arm_against_torch_and_its_kernel_groups():
    kt = step_kernels.group_times(_trace([("max_pool_backward_nhwc", 30.0), ("sm90_xmma_fprop", 70.0)]), 1)
    arms = [{"arm": "torch", "status": "ok", "step_ms": {"median": 4.0, "p10": 3.9, "p90": 4.2},
             "warmup_s": 30.0, "kernel_time": kt},
            {"arm": "bn_act=triton", "status": "ok", "step_ms": {"median": 3.0, "p10": 2.9, "p90": 3.1},
             "warmup_s": 20.0, "kernel_time": None},
            {"arm": "bn_act=cuda", "status": "skipped", "reason": "budget"}]
    text = step_timing.summary({"arms": arms})
    assert "0.750x torch's" in text and "conv 70.0%, max_pool 30.0%" in text and "0.100 ms a step" in text
    assert "bn_act=cuda: skipped (budget)" in text


def _trace(kernels: list[tuple[str, float]]) -> Trace:
    ks, ts = [], 0.0
    for name, dur in kernels:
        ks.append(Kernel(name, ts, dur, "kernel"))
        ts += dur
    return Trace("<test>", [], ks, [], False)


def test_kernel_names_go_to_their_groups():
    cases = {
        "augment_kernel": "augment", "void augment_crop_flip_bf16<4>(...)": "augment",
        "affine_act_kernel": "bn_act", "channel_stats_kernel": "bn_act",
        "bn_stats_partial_vec_bf16": "bn_act",
        "triton_per_fused__native_batch_norm_legit_functional_gelu_3": "bn_act",
        "triton_red_fused_max_pool2d_with_indices_native_batch_norm_7": "max_pool",
        "void at::native::max_pool_backward_nhwc<c10::BFloat16>(...)": "max_pool",
        "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc": "conv",
        "sm90_xmma_wgrad_implicit_gemm_bf16": "conv", "conv3x3_fwd_kernel": "conv",
        "nvjet_tst_128x64_64x6_1x2_h_bz_TNN": "matmul", "gemm_kernel": "matmul",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...>": "optimizer",
        "Memset (Device)": "copy",
        "void at::native::vectorized_elementwise_kernel<4, ...>": "other",
    }
    for name, group in cases.items():
        assert step_kernels.group_of(name) == group, name


def test_group_times_per_step_and_weighted_over_variants():
    t = _trace([("affine_act_kernel", 30.0), ("triton_red_fused_max_pool2d_native_batch_norm_1", 20.0),
                ("sm90_xmma_fprop_implicit_gemm", 40.0), ("elementwise_kernel", 10.0)] * 2)
    g = step_kernels.group_times(t, steps=2)
    assert g["kernel_us_per_step"] == 100.0
    assert {k: v["us_per_step"] for k, v in g["groups"].items()} == {"conv": 40.0, "bn_act": 30.0,
                                                                      "max_pool": 20.0, "other": 10.0}
    assert g["groups"]["max_pool"]["share"] == pytest.approx(0.2)
    assert g["fused_across"] == {"triton_red_fused_max_pool2d_native_batch_norm": ["max_pool", "bn_act"]}
    other = step_kernels.group_times(_trace([("affine_act_kernel", 100.0)]), steps=1)
    both = step_kernels.weighted([(3, g), (1, other)])  # three steps of the first variant to one
    assert both["kernel_us_per_step"] == pytest.approx(100.0)
    assert both["groups"]["bn_act"]["us_per_step"] == pytest.approx(0.75 * 30 + 0.25 * 100)
    assert both["groups"]["conv"]["share"] == pytest.approx(0.3)
    with pytest.raises(ValueError):
        step_kernels.group_times(t, steps=0)
