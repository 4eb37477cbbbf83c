"""benchmarks/latency_ab.py, the image-by-image A/B of two forms of the
evaluation's net: each arm is the net it names (the activations fused or run
by ATen, the weights reordered or on F.conv2d) with the same logits within
the rounding; the loop interleaves the arms and writes its JSON; a bad
``--arms`` is one line and exit 2. The timing itself is the script's run,
not a test."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast.cifar import Config
from dawnbench_fast.cifar.evaluation import inference_net
from dawnbench_fast.cifar.recipe import RECIPES
from dawnbench_fast.models import inference_conv
from dawnbench_fast.models.cifar_net import CifarNet
from dawnbench_fast.models.inference_conv import InferenceConv2d

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import latency_ab  # noqa: E402


def _model() -> CifarNet:
    torch.manual_seed(2)
    model = CifarNet((16, 32, 32)).eval()
    model.init_whitening(torch.randn(64, 3, 32, 32), eps=5e-4)
    return model.to(memory_format=torch.channels_last)


@pytest.mark.skipif(not inference_conv.AVAILABLE, reason="needs torch's oneDNN (mkldnn) ops")
def test_each_arm_is_the_net_it_names_with_the_same_logits():
    model = _model()
    x = torch.randn(6, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    nets, logits, cfgs = {}, {}, {}
    cfg = Config(tta_shift_below=0.7)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        for arm, change in latency_ab.ARMS.items():
            nets[arm] = inference_net(model, precision="bf16")
            cfgs[arm] = change(nets[arm], cfg)
            logits[arm] = nets[arm](x).float()
    # the net arms evaluate as the model's runs did; the TTA arms change the cascade only, on the built net
    assert all(cfgs[a] is cfg for a in ("built", "conv2d", "unfused"))
    assert cfgs["one-step"] == replace(cfg, tta_shift_below=1.0)
    assert cfgs["cascade"] == replace(cfg, tta_shift_below=RECIPES["dawnbench_fast_cpu"]["tta_shift_below"])
    for arm in ("one-step", "cascade"):
        assert torch.equal(logits[arm], logits["built"])
    built, unfused, conv2d = nets["built"], nets["unfused"], nets["conv2d"]
    assert all(isinstance(c, InferenceConv2d) and c.reorder for c in (built.whiten, *built.convs))
    assert built.whiten.post_act == model.whiten_act and built.convs[1].post_act == model.act
    # unfused: every activation ATen's, after a conv that fuses none; the whitening conv on F.conv2d
    wrapped = [m for m in (unfused.whiten, *unfused.convs) if isinstance(m, latency_ab._AtenActivation)]
    assert len(wrapped) == 4 and all(m.conv.post_act == "identity" for m in wrapped)
    assert [m.act for m in wrapped] == [model.whiten_act] + [model.act] * 3
    assert not unfused.whiten.conv.reorder
    assert all(c.reorder for c in unfused.convs if isinstance(c, InferenceConv2d))
    assert not any(c.reorder for c in (conv2d.whiten, *conv2d.convs))
    scale = logits["conv2d"].abs().max().item()
    for arm in ("built", "unfused"):
        assert (logits[arm] - logits["conv2d"]).abs().max().item() <= 0.05 * scale, arm


def test_the_loop_interleaves_the_arms_and_writes_its_json(tmp_path):
    out = tmp_path / "ab.json"
    r = subprocess.run([sys.executable, str(BENCH / "latency_ab.py"), "--arms", "conv2d,built",
                        "--images", "3", "--rounds", "2", "--data-dir", str(cifar_dir()), "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    got = json.loads(out.read_text())
    assert got["arms"] == ["conv2d", "built"] and got["model"] is None
    for arm in ("conv2d", "built"):
        assert got[arm]["images"] == 3 and len(got[arm]["rounds_ms"]) == 2
        assert all(ms > 0 for ms in got[arm]["rounds_ms"]) and 0 <= got[arm]["top1_hits"] <= 3
    assert got["ratio_b_over_a"] == pytest.approx(got["built"]["mean_ms"] / got["conv2d"]["mean_ms"])
    assert len(got["by_round"]) == 2 and got["git"]["source"] == "git"
    assert r.stdout.count("round:") == 2


def test_the_batched_mode_times_each_arms_evaluation_and_writes_its_json(tmp_path):
    out = tmp_path / "ab.json"
    r = subprocess.run([sys.executable, str(BENCH / "latency_ab.py"), "--arms", "one-step,cascade",
                        "--batched", "--images", "40", "--rounds", "2", "--data-dir", str(cifar_dir()),
                        "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    got = json.loads(out.read_text())
    assert got["mode"] == "batched" and got["arms"] == ["one-step", "cascade"]
    assert got["one-step"]["tta_shift_below"] == 1.0
    assert got["cascade"]["tta_shift_below"] == RECIPES["dawnbench_fast_cpu"]["tta_shift_below"]
    for arm in ("one-step", "cascade"):
        assert got[arm]["images"] == 40 and len(got[arm]["rounds_s"]) == 2
        assert all(s > 0 for s in got[arm]["rounds_s"]) and 0 <= got[arm]["top1"] <= 1
        assert 1 <= got[arm]["views_per_image"] <= 6
    # random weights: every image unsure, so one step takes all six views; the cascade no more
    assert got["one-step"]["views_per_image"] == 6
    assert got["cascade"]["views_per_image"] <= 6
    assert got["ratio_b_over_a"] == pytest.approx(got["cascade"]["mean_s"] / got["one-step"]["mean_s"])
    assert r.stdout.count("round:") == 2


def test_bad_arms_are_one_line_and_exit_2(capsys):
    for arms in ("built", "built,built", "built,fused"):
        with pytest.raises(SystemExit) as e:
            latency_ab.main(["--arms", arms])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"--arms {arms}" in err


def test_a_missing_data_folder_is_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "none"
    r = subprocess.run([sys.executable, str(BENCH / "latency_ab.py"), "--data-dir", str(missing),
                        "--images", "1"],
                       capture_output=True, text=True, timeout=120)
    err = r.stderr.strip()
    assert r.returncode == 2 and err.startswith("latency_ab: ") and err.count("\n") == 0
    assert str(missing) in err
