"""The default precision follows the CPU: bf16 autocast only where
the CPU computes bf16 natively, fp32 elsewhere; an explicit precision wins;
run.json says what ran and why; the C++ kernels are refused, not run, on a CPU
their build cannot execute."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast import cifar
from dawnbench_fast.config import precision
from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.csrc.engine import build_isa_reason
from dawnbench_fast.execution.runtime import autocast

CPU = torch.device("cpu")
ZEN5 = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16"}
SAPPHIRE_RAPIDS = {"avx2", "avx512f", "avx512bw", "avx512vl", "amx_bf16", "amx_tile"}
AVX2_LAPTOP = {"avx2", "fma"}
GRAVITON3 = {"fp", "asimd", "sve", "bf16", "i8mm"}
GRAVITON2 = {"fp", "asimd", "atomics"}


@pytest.mark.parametrize("flags,machine,capability,want", [
    (ZEN5, "x86_64", "AVX512", "bf16"),
    (SAPPHIRE_RAPIDS, "x86_64", "AVX512", "bf16"),
    (AVX2_LAPTOP, "x86_64", "AVX2", "fp32"),
    (AVX2_LAPTOP | {"avx512f", "avx512bw", "avx512vl"}, "x86_64", "AVX512", "fp32"),  # no bf16 unit
    (ZEN5, "x86_64", "AVX2", "fp32"),  # ATEN_CPU_CAPABILITY=avx2: ATen's bf16 is emulated
    (ZEN5, "x86_64", "DEFAULT", "fp32"),
    (GRAVITON3, "aarch64", "DEFAULT", "bf16"),
    (GRAVITON3, "arm64", "SVE256", "bf16"),
    (GRAVITON2, "aarch64", "DEFAULT", "fp32"),
    (set(), "x86_64", "AVX512", "fp32"),  # flags unknown: nothing native is claimed
    ({"bf16"}, "riscv64", "DEFAULT", "fp32"),
])
def test_auto_follows_the_cpus_features(flags, machine, capability, want):
    choice = precision.resolve_precision("auto", CPU, flags=flags, machine=machine, capability=capability)
    assert (choice.requested, choice.precision) == ("auto", want)
    assert choice.why.startswith("auto: ") and len(choice.why.splitlines()) == 1


def test_the_reason_names_what_decided():
    why = precision.resolve_precision("auto", CPU, flags=ZEN5, machine="x86_64", capability="AVX2").why
    assert "AVX2" in why and "avx512_bf16" in why
    why = precision.resolve_precision("auto", CPU, flags=AVX2_LAPTOP, machine="x86_64", capability="AVX2").why
    assert "avx512_bf16" in why and "amx_bf16" in why and "emulated" in why


@pytest.mark.parametrize("asked", ["bf16", "fp16", "fp32"])
def test_an_explicit_precision_is_obeyed(asked):
    for flags, capability in ((ZEN5, "AVX512"), (AVX2_LAPTOP, "AVX2")):
        choice = precision.resolve_precision(asked, CPU, flags=flags, machine="x86_64", capability=capability)
        assert choice.precision == asked and choice.why.startswith("asked for")
    emulated = precision.resolve_precision("bf16", CPU, flags=AVX2_LAPTOP, machine="x86_64",
                                           capability="AVX2")
    assert "emulated" in emulated.why  # obeyed, but the record says what it costs


def test_auto_on_cuda_is_bf16_and_nonsense_is_refused():
    assert precision.resolve_precision("auto", torch.device("cuda")).precision == "bf16"
    assert precision.resolve_precision("fp16", torch.device("cuda")).precision == "fp16"
    with pytest.raises(ValueError, match="precision"):
        precision.resolve_precision("int8", CPU)


def test_the_config_records_the_choice():
    cfg, choice = precision.with_resolved_precision(cifar.Config(extra={"recipe": "hiverge"}), CPU)
    assert cfg.precision == choice.precision and cfg.precision in ("bf16", "fp32")
    assert cfg.extra == {"recipe": "hiverge",  # other notes kept
                         "precision": {"requested": "auto", "precision": cfg.precision, "why": choice.why}}
    again, _ = precision.with_resolved_precision(cfg, CPU)  # a config read back from run.json
    assert again.precision == cfg.precision and again.extra["precision"]["requested"] == cfg.precision


def test_autocast_resolves_auto_as_the_run_does():
    want = precision.resolve_precision("auto", CPU).precision
    with autocast("auto", CPU):
        y = torch.nn.functional.linear(torch.randn(2, 4), torch.randn(3, 4))
    assert y.dtype == (torch.bfloat16 if want == "bf16" else torch.float32)


def test_flag_and_set_override_the_default():
    p = cifar.build_parser()
    assert cifar.config_from_args(p.parse_args([])).precision == "auto"
    assert cifar.config_from_args(p.parse_args(["--precision", "fp32"])).precision == "fp32"
    assert cifar.config_from_args(p.parse_args(["--set", "precision=bf16"])).precision == "bf16"
    with pytest.raises(ConfigError, match="precision"):
        cifar.config_from_args(p.parse_args(["--set", "precision=fp8"]))


@pytest.mark.parametrize("path,vectorised,flags,machine,refused", [
    ("march", True, ZEN5, "x86_64", False),
    ("march", True, AVX2_LAPTOP, "x86_64", True),  # a -march=native AVX-512 build on an AVX2 CPU: SIGILL
    ("march", False, AVX2_LAPTOP, "x86_64", False),
    ("march", True, set(), "x86_64", False),  # flags unknown
    ("march", True, GRAVITON3, "aarch64", False),
    # the portable build chose its path from the CPU itself: never refused
    ("baseline", False, AVX2_LAPTOP, "x86_64", False),
    ("avx512", True, AVX2_LAPTOP, "x86_64", False),
])
def test_cpu_kernels_built_for_a_cpu_this_one_is_not_are_refused(path, vectorised, flags, machine, refused):
    reason = build_isa_reason(path, vectorised, flags, machine)
    assert (reason is not None) == refused
    if refused:
        assert "avx512f" in reason and "pip install -e ." in reason


@pytest.mark.e2e
def test_a_run_under_aten_avx2_runs_in_fp32_and_says_why(tmp_path):
    """The smoke configuration with ATen narrowed to AVX2 (as on an AVX2-only
    CPU): it trains, picks fp32 and records why; the cpu kernels still serve
    where the C++ build runs here. About 30-40 s on 2 busy cores."""
    env = {**os.environ, "DAWNBENCH_DATA": str(cifar_dir()), "ATEN_CPU_CAPABILITY": "avx2"}
    out = tmp_path / "run"
    r = subprocess.run(
        [sys.executable, "-m", "dawnbench_fast.cifar", "--subset", "500", "--epochs", "1",
         "--eval-subset", "200", "--batch-size", "250", "--set", "whiten_images=500", "--latency-images", "0",
         "--threads", "2", "--set", "tta_level=0", "--no-progress", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["precision"] == "fp32"
    note = run["config"]["extra"]["precision"]
    assert note["requested"] == "auto" and note["precision"] == "fp32" and "AVX2" in note["why"]
    assert "precision fp32" in r.stderr and "precision=fp32" in r.stdout
    assert 0.0 <= run["result"]["final_top1"] <= 1.0
