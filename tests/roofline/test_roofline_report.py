"""Reports from traces recorded here on the CPU: bytes, attribution, the
custom-op registration path, outputs (text, JSON, PNG, SVG, HTML), the live
API and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dawnbench_fast import roofline
from dawnbench_fast.roofline import cli as roofline_cli
from dawnbench_fast.roofline.outputs import write_report_set
from dawnbench_fast.roofline.peaks import Peaks
from dawnbench_fast.roofline.registry import register_cost
from dawnbench_fast.roofline.report import build_report

# Fixed made-up peaks so that these tests do not run the CPU microbenchmark.
PEAKS = Peaks("test cpu", {"fp32": 100e9, "bf16": 400e9}, 50e9, "cpu",
              {"fp32": "test", "bf16": "test", "bandwidth": "test"})


def _report(fn, tmp_path, **kw):
    with roofline.capture(trace_path=tmp_path / "trace.json") as cap:
        fn()
    return build_report(cap.trace_path, PEAKS, **kw)


def test_elementwise_minimal_bytes(tmp_path):
    torch.manual_seed(0)
    a = torch.randn(37, 19)
    b = torch.randn(37, 19)
    h = torch.randn(5, 33, dtype=torch.bfloat16)
    rep = _report(lambda: (torch.add(a, b), F.gelu(h), a.mul_(0.5)), tmp_path)
    rows = {r.op: r for r in rep.rows}
    assert rows["aten::add"].bytes == 3 * 37 * 19 * 4
    assert rows["aten::add"].flops == 37 * 19
    assert rows["aten::gelu"].bytes == 2 * 5 * 33 * 2
    assert rows["aten::gelu"].dtypes == "bf16"
    # in-place: read self, write self, plus the Python scalar, which the
    # dispatcher wraps as a one-element double tensor
    mul = rows["aten::mul_"]
    assert mul.bytes == 2 * 37 * 19 * 4 + 8
    assert rep.totals["coverage"] >= 0.99


def test_batchnorm_pool_softmax_forward_backward_are_counted(tmp_path):
    torch.manual_seed(1)
    bn = torch.nn.BatchNorm2d(7)
    x = torch.randn(3, 7, 9, 11, requires_grad=True)

    def run():
        y = F.max_pool2d(bn(x), 2)
        loss = F.cross_entropy(y.flatten(1), torch.randint(0, 7 * 4 * 5, (3,)))
        loss.backward()

    rep = _report(run, tmp_path)
    ops = {r.op for r in rep.rows}
    for needed in ("aten::batch_norm", "aten::native_batch_norm_backward",
                   "aten::max_pool2d", "aten::max_pool2d_with_indices_backward",
                   "aten::log_softmax", "aten::_log_softmax_backward_data",
                   "aten::nll_loss_nd", "aten::nll_loss_backward"):
        assert needed in ops, (needed, sorted(ops))
    bn_row = next(r for r in rep.rows if r.op == "aten::batch_norm")
    assert bn_row.flops == 7 * x.numel()
    # x read once, y written once; 4 per-channel vectors read, 2 running stats
    # updated (counted as the 4 vectors twice: an upper bound on the vectors)
    assert bn_row.bytes == 2 * x.numel() * 4 + 2 * 4 * 7 * 4
    pool = next(r for r in rep.rows if r.op == "aten::max_pool2d")
    assert pool.flops == 3 * 7 * 4 * 5 * 4  # one compare per window element
    assert rep.totals["coverage"] >= 0.99, rep.uncounted


@torch.library.custom_op("roofline_test::numpy_square", mutates_args=())
def numpy_square(x: torch.Tensor) -> torch.Tensor:
    # numpy inside: no aten op is recorded under it, so it is a leaf op
    return torch.from_numpy(np.square(x.numpy()))


def test_custom_op_is_uncounted_until_it_registers_a_cost(tmp_path):
    x = torch.randn(41, 3)
    rep = _report(lambda: numpy_square(x), tmp_path)
    unc = {d["name"]: d for d in rep.uncounted}
    assert "roofline_test::numpy_square" in unc
    assert unc["roofline_test::numpy_square"]["time_us"] > 0
    assert "roofline_test::numpy_square" in (tmp_path / "trace.json").read_text()

    register_cost("roofline_test::numpy_square",
                  lambda shapes, dtypes: (float(np.prod(shapes[0])), 8.0 * np.prod(shapes[0])))
    rep = build_report(tmp_path / "trace.json", PEAKS)
    row = next(r for r in rep.rows if r.op == "roofline_test::numpy_square")
    assert (row.flops, row.bytes) == (41 * 3, 8 * 41 * 3)
    assert not any(d["name"] == "roofline_test::numpy_square" for d in rep.uncounted)


def test_no_time_is_counted_twice(tmp_path):
    torch.manual_seed(2)
    conv = torch.nn.Conv2d(3, 5, 3)
    x = torch.randn(2, 3, 12, 12, requires_grad=True)
    rep = _report(lambda: conv(x).sum().backward(), tmp_path)
    trace = roofline.report.load_trace(tmp_path / "trace.json")
    # op time = summed time of the top-level ops minus container self time
    top = sum(r.dur for r in trace.roots)
    t = rep.totals
    assert t["op_time_us"] + t["overhead_time_us"] == pytest.approx(top, rel=1e-6)
    # counted FLOPs appear once: conv2d owns its inner convolution/_convolution
    fwd = [r for r in rep.rows if r.matmul and "backward" not in r.op]
    assert sum(r.flops for r in fwd) == 2 * 2 * 5 * 10 * 10 * 3 * 9


def test_report_outputs(tmp_path):
    torch.manual_seed(3)
    w = torch.randn(24, 17, requires_grad=True)
    x = torch.randn(9, 24)
    rep = _report(lambda: (x @ w).relu().sum().backward(), tmp_path, steps=1)
    paths = write_report_set(rep, tmp_path / "out")
    data = json.loads(paths["json"].read_text())
    # forward mm + the weight-gradient mm (x needs no gradient)
    assert data["totals"]["matmul_conv_flops"] == pytest.approx(2 * 2 * 9 * 24 * 17)
    assert data["totals"]["flops_per_step"] == pytest.approx(data["totals"]["flops"])
    assert data["device"]["name"] == "test cpu"
    assert {"op", "time_us", "flops", "bytes", "intensity", "pct_of_roof", "bound"} <= set(
        data["rows"][0])
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in paths["svg"].read_text()[:2000]
    html = paths["html"].read_text()
    assert "<svg" in html and "aten::mm" in html and "% of roof" in html
    # the time chart (per op and per category) is written and inlined, with its table
    assert paths["time_png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert html.count("<svg") == 2 and "Where the op time goes" in html
    assert "<tr><td>matmul/conv</td>" in html and "time by category" in paths["time_svg"].read_text()
    text = paths["text"].read_text()
    assert "matmul/conv" in text and "Uncounted ops" in text and "aten::mm" in text


def test_profile_training_writes_trace_and_reports(tmp_path, monkeypatch):
    monkeypatch.setattr("dawnbench_fast.roofline.cpu_peaks.cpu_peaks", lambda **kw: PEAKS)
    torch.manual_seed(4)
    lin = torch.nn.Linear(11, 5)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    x = torch.randn(7, 11)
    calls = []

    def step():
        calls.append(1)
        lin(x).square().sum().backward()
        opt.step()
        opt.zero_grad()

    out = roofline.profile_training(step, 2, tmp_path / "prof", warmup=1, device="cpu")
    assert len(calls) == 3
    for name in ("trace.json", "report.txt", "report.json", "report.html", "roofline.png",
                 "roofline.svg"):
        assert (out / name).stat().st_size > 0, name
    data = json.loads((out / "report.json").read_text())
    assert data["steps"] == 2
    # the wall clock of the profiled steps covers at least their op time
    assert data["totals"]["wall_time_us"] >= data["totals"]["op_time_us"]
    assert 0 < data["totals"]["wall_fraction_of_peak"] <= data["totals"]["fraction_of_peak"]
    assert "wall clock of the profiled region" in (out / "report.txt").read_text()
    # forward + 2 backward mms per step (weight grad and input grad are not both
    # needed: x has no grad, so the backward has one mm for the weight)
    assert data["totals"]["matmul_conv_flops"] == pytest.approx(2 * (2 * 2 * 7 * 11 * 5))
    with pytest.raises(ValueError, match="--profile-steps"):
        roofline.profile_training(step, 0, tmp_path / "p2")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dawnbench_fast.roofline", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_report_and_errors(tmp_path, capsys):
    torch.manual_seed(5)
    a = torch.randn(13, 8)
    _report(lambda: torch.mm(a, a.T), tmp_path)
    peaks_file = tmp_path / "peaks.json"
    peaks_file.write_text(json.dumps({"name": "filebox", "gflops": {"fp32": 50},
                                      "bandwidth_gbs": 20}))
    r = _cli("report", str(tmp_path / "trace.json"), "--peaks", str(peaks_file),
             "--out", str(tmp_path / "cli_out"))
    assert r.returncode == 0, r.stderr
    assert "filebox" in r.stdout and "aten::mm" in r.stdout
    assert (tmp_path / "cli_out" / "report.html").exists()
    # the errors, through the same main() in this process: one line each, exit 2
    not_json = tmp_path / "bad.json"
    not_json.write_text("{nope")
    for args, says in [((str(tmp_path / "missing.json"), "--device", "H100 SXM"), "does not exist"),
                       ((str(tmp_path / "trace.json"), "--device", "Z80"), "--device 'Z80'"),
                       ((str(not_json), "--device", "A100 80GB"), "not valid JSON")]:
        assert roofline_cli.main(["report", *args]) == 2, args
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, err


def test_gzipped_trace_and_capture_misuse(tmp_path):
    import gzip

    torch.manual_seed(6)
    a = torch.randn(11, 6)
    rep = _report(lambda: torch.mm(a, a.T), tmp_path)
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress((tmp_path / "trace.json").read_bytes()))
    rep_gz = build_report(gz, PEAKS)
    assert rep_gz.totals["flops"] == rep.totals["flops"] == 2 * 11 * 6 * 11
    with pytest.raises(RuntimeError, match="after the"):
        roofline.capture().report()


class _Scale(torch.autograd.Function):
    """A Python autograd.Function: the profiler records its forward by class
    name, around the aten ops that do the work."""

    @staticmethod
    def forward(ctx, x):
        return x * 3.0

    @staticmethod
    def backward(ctx, g):
        return g * 3.0


def test_python_autograd_function_is_a_framework_container(tmp_path):
    x = torch.randn(23, 5, requires_grad=True)
    rep = _report(lambda: _Scale.apply(x).sum().backward(), tmp_path)
    assert not any(d["name"] == "_Scale" for d in rep.uncounted), rep.uncounted
    assert rep.totals["coverage"] >= 0.99
    assert any(r.op == "aten::mul" for r in rep.rows)


def test_trace_without_shapes_is_refused(tmp_path):
    from torch.profiler import profile

    x = torch.randn(4, 7)
    with profile() as prof:  # record_shapes left off
        torch.mm(x, x.T)
    path = tmp_path / "noshapes.json"
    prof.export_chrome_trace(str(path))
    with pytest.raises(ValueError, match="record_shapes=True"):
        build_report(path, PEAKS)
    r = _cli("report", str(path), "--device", "T4")
    assert r.returncode == 2 and "record_shapes=True" in r.stderr


def test_a_step_above_its_roof_says_the_peaks_are_too_low(tmp_path):
    """A roof the step's matmul/conv work passes as a whole is a wrong roof (a
    CPU's peaks measured on a busy machine and kept by the cache): the report
    says so, with the fix, instead of printing 290% of peak as a reading."""
    torch.manual_seed(3)
    x = torch.randn(8, 32, 12, 12)
    w = torch.randn(32, 32, 3, 3)
    conv = lambda: F.conv2d(x, w, padding=1)  # noqa: E731
    low = Peaks("busy cpu", {"fp32": 1e6, "bf16": 1e6}, 1e3, "cpu", {}, measured=True)
    with roofline.capture(trace_path=tmp_path / "trace.json") as cap:
        conv()
    (above,) = [w for w in build_report(cap.trace_path, low).warnings if "of their roof" in w]
    assert "aten::conv" in above and "busy cpu" in above and "peaks --refresh" in above
    for given in (Peaks("a table", low.flops, 1e3, "gpu", {}),  # the GPU table, or a --peaks file
                  Peaks("a file", low.flops, 1e3, "cpu", {}, notes="measured by hand")):
        assert "--device or --peaks" in [w for w in build_report(cap.trace_path, given).warnings
                                         if "roof" in w][0]
    high = Peaks("any cpu", {"fp32": 1e15, "bf16": 1e15}, 1e15, "cpu", {}, measured=True)
    assert not [w for w in build_report(cap.trace_path, high).warnings if "roof" in w]
