"""Ahead-of-time compilation of every Triton kernel for sm_80 and sm_90, and
the resource report, in a subprocess without TRITON_INTERPRET (triton.compile
does not work under the interpreter). No GPU is needed."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

from dawnbench_fast.kernels import report  # noqa: E402

KERNELS = {"conv3x3_fwd_kernel", "conv3x3_wgrad_kernel", "channel_stats_kernel", "bn_finalize_kernel",
           "bn_bwd_coef_kernel",
           "affine_act_kernel", "bn_act_bwd_reduce_kernel", "bn_act_bwd_apply_kernel",
           "augment_kernel", "gemm_kernel", "bias_act_fwd_kernel", "bias_act_bwd_kernel"}


def _env():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONWARNINGS"] = "ignore"
    return env


@pytest.fixture(scope="module")
def report_rows():
    out = subprocess.run(
        [sys.executable, "-m", "dawnbench_fast.kernels.report", "--json", "--one-per-kernel"],
        env=_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.mark.build
def test_every_kernel_compiles_for_sm80_and_sm90(report_rows):
    names = {r["kernel"].split("[")[0] + "_kernel" for r in report_rows}
    assert names == KERNELS
    for target in ("sm_80", "sm_90"):
        rows = [r for r in report_rows if r["target"] == target]
        assert len(rows) == len(KERNELS), target
        for r in rows:
            assert r["cubin_bytes"] > 0 and r["ptx_bytes"] > 0, r
            assert 0 < r["registers"] <= 255, r
            assert r["num_warps"] in (1, 2, 4, 8, 16), r
            assert r["shared_bytes"] >= 0 and r["local_bytes"] >= 0, r


# The variants of the redesigned ops (the conv group, bn_act) that the model launches
# in bf16 (each must compile for sm_80 and sm_90 without spills).
NO_SPILL_PREFIXES = ("conv3x3_fwd[bf16", "conv3x3_wgrad[bf16", "channel_stats", "bn_",
                     "affine_act")


@pytest.mark.build
def test_model_variants_compile_without_spills():
    args = [a for p in NO_SPILL_PREFIXES for a in ("--only", p)]
    out = subprocess.run([sys.executable, "-m", "dawnbench_fast.kernels.report", "--json", *args],
                         env=_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(out.stdout)
    assert {r["target"] for r in rows} == {"sm_80", "sm_90"}
    assert {r["kernel"].split("[")[0] for r in rows} >= {"conv3x3_fwd", "conv3x3_wgrad",
                                                         "bn_act_bwd_apply", "affine_act"}
    # every activation the recipes launch, in each kernel that applies one (the default's SiLU)
    for act in ("silu", "gelu"):
        applied = {r["kernel"].split("[")[0] for r in rows if f",{act}" in r["kernel"]}
        assert applied >= {"affine_act", "bn_act_bwd_reduce", "bn_act_bwd_apply", "conv3x3_wgrad"}, act
    spilled = [(r["target"], r["kernel"], r["config"], r["local_bytes"], r["stack_bytes"])
               for r in rows if r["local_bytes"] or r["stack_bytes"]]
    assert not spilled, spilled


def test_the_variants_cover_the_activations_the_recipes_launch():
    import dataclasses

    from dawnbench_fast.cifar.recipe import RECIPES, CifarRecipe
    from dawnbench_fast.kernels.aot import ACTS

    for name, fields in RECIPES.items():
        r = dataclasses.replace(CifarRecipe(), **fields)
        assert {r.act, r.whiten_act} <= set(ACTS), (name, r.act, r.whiten_act)


def test_report_only_names_a_missing_prefix(monkeypatch, capsys):
    # in this process: the variants are listed, none is compiled (the command's own
    # process is the build tier's, above)
    monkeypatch.delenv("TRITON_INTERPRET")
    assert report.main(["--only", "nope["]) == 2
    err = capsys.readouterr().err
    assert "nope[" in err and len(err.strip().splitlines()) == 1


@pytest.mark.build
def test_tensor_core_instructions_in_gemm_and_conv():
    """The GEMM and the convs use mma on sm_80 and wgmma/mma on sm_90."""
    code = (
        "import warnings; warnings.filterwarnings('ignore')\n"
        "import triton\n"
        "from triton.compiler import ASTSource\n"
        "from dawnbench_fast.kernels.aot import TARGETS, specs\n"
        "for s in specs(one_per_kernel=True):\n"
        "    if s.kernel.__name__ not in ('gemm_kernel', 'conv3x3_fwd_kernel',\n"
        "                                 'conv3x3_wgrad_kernel'): continue\n"
        "    for t in TARGETS:\n"
        "        k = triton.compile(ASTSource(s.kernel, s.signature(), s.constexprs),\n"
        "                           target=TARGETS[t], options={'num_warps': s.num_warps})\n"
        "        ptx = k.asm['ptx']\n"
        "        print(s.kernel.__name__, t, 'wgmma' in ptx, 'mma.sync' in ptx)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [ln.split() for ln in out.stdout.strip().splitlines()]
    assert len(lines) == 6
    for name, target, wgmma, mma in lines:
        assert wgmma == "True" or mma == "True", (name, target)
        if target == "sm_80":
            assert mma == "True", name


def test_report_refuses_under_interpreter(monkeypatch, capsys):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert report.main([]) == 2
    err = capsys.readouterr().err
    assert "TRITON_INTERPRET" in err and len(err.strip().splitlines()) == 1
