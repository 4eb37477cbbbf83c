"""The CUDA trace and Nsight Compute CSV fixtures (written by hand to the
documented formats: no GPU here; see tests/fixtures/roofline/README.md)."""

from __future__ import annotations

import pathlib

import pytest

from dawnbench_fast.roofline.analysis import attribute
from dawnbench_fast.roofline.ncu import NcuError, parse_ncu_csv
from dawnbench_fast.roofline.ncu_report import ncu_report
from dawnbench_fast.roofline.peaks import GPU_TABLE
from dawnbench_fast.roofline.registry import register_cost
from dawnbench_fast.roofline.report import build_report
from dawnbench_fast.roofline.trace import load_trace
from dawnbench_fast.roofline.trace_args import numel, tensor_bytes

FIX = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "roofline"
TRACE = FIX / "cuda_trace_handwritten.json"
CONV_FLOPS = 2 * 8 * 128 * 32 * 32 * 64 * 9  # per conv pass (fprop, dgrad or wgrad)


def _scale_cost(shapes, dtypes):
    n = numel(shapes[0])
    return float(n), float(2 * tensor_bytes(shapes[0], dtypes[0]))


@pytest.fixture(autouse=True)
def _custom_op_cost():
    register_cost("dawnbench::fixture_scale", _scale_cost)


def test_kernels_link_to_launching_ops():
    trace = load_trace(TRACE)
    assert trace.on_gpu and len(trace.kernels) == 7
    by_name = {k.name.split("_implicit")[0]: k for k in trace.kernels}
    # External id links the cuDNN kernel to the innermost op that launched it
    assert by_name["sm90_xmma_fprop"].op.name == "aten::cudnn_convolution"
    # a kernel with only a correlation id is linked through its launch call
    scale = next(k for k in trace.kernels if k.name == "fixture_scale_kernel")
    assert scale.ext_id is None and scale.op.name == "dawnbench::fixture_scale"
    memcpy = next(k for k in trace.kernels if k.cat == "gpu_memcpy")
    assert memcpy.op is None


def test_device_time_is_attributed_to_counted_ops():
    rep = build_report(TRACE)  # peaks from the trace's deviceProperties
    assert rep.peaks.name == "H100 SXM"
    assert rep.time_basis == "device"
    rows = {r.op: r for r in rep.rows}
    fwd = rows["aten::conv2d"]  # the outermost op with a formula owns the kernel
    assert fwd.time_us == pytest.approx(40.0)
    assert fwd.flops == pytest.approx(CONV_FLOPS)
    assert fwd.matmul and fwd.precision == "bf16" and fwd.roof_precision == "bf16"
    bwd = rows["aten::convolution_backward"]
    assert bwd.time_us == pytest.approx(42.0 + 45.0)
    assert bwd.flops == pytest.approx(2 * CONV_FLOPS)
    assert len(bwd.kernels) == 2
    add = rows["aten::add_"]
    assert add.time_us == pytest.approx(6.0)
    assert add.bytes == pytest.approx(3 * 8 * 128 * 32 * 32 * 2)
    assert add.bound == "memory"
    assert rows["dawnbench::fixture_scale"].time_us == pytest.approx(5.0)
    # host-only ops (the autograd wrappers) carry no device time and no row
    assert all(r.time_us > 0 for r in rep.rows)
    t = rep.totals
    assert t["op_time_us"] == pytest.approx(143.0)
    assert t["coverage"] == pytest.approx(138.0 / 143.0)
    assert t["matmul_conv_flops"] == pytest.approx(3 * CONV_FLOPS)
    # % of roof: achieved / attainable at the row's intensity on the bf16 roof
    achieved = CONV_FLOPS / 40e-6
    attainable = min(989e12, fwd.intensity * 3.35e12)
    assert fwd.pct_of_roof == pytest.approx(achieved / attainable)


def test_uncounted_device_time_is_listed_by_name():
    rep = build_report(TRACE, GPU_TABLE["H100 SXM"])
    unc = {d["name"]: d for d in rep.uncounted}
    assert unc["dawnbench::unregistered_op"]["time_us"] == pytest.approx(3.0)
    assert unc["[kernel] Memcpy HtoD (Pageable -> Device)"]["time_us"] == pytest.approx(2.0)
    assert sum(d["time_us"] for d in rep.uncounted) == pytest.approx(5.0)
    kernels = {d["kernel"]: d for d in rep.kernels}
    assert len(kernels) == 7
    assert kernels["mystery_kernel"]["op"] == "dawnbench::unregistered_op"


def test_attribution_without_formula_for_custom_op():
    # Without its formula the custom op's kernel time moves to the uncounted list
    from dawnbench_fast.roofline import registry

    registry._REGISTRY.pop("dawnbench::fixture_scale", None)
    attr = attribute(load_trace(TRACE))
    names = {u.op.name for u in attr.units if not u.counted}
    assert "dawnbench::fixture_scale" in names


def test_ncu_raw_csv():
    kernels = parse_ncu_csv(FIX / "ncu_raw_handwritten.csv")
    assert len(kernels) == 6
    fprop = kernels[0]
    assert fprop.time_s == pytest.approx(48.64e-6)
    assert fprop.dram_bytes == pytest.approx((1.31 + 2.10) * 1e6)
    assert fprop.flops == pytest.approx(CONV_FLOPS)
    add = kernels[1]
    assert add.flops == pytest.approx(1_048_576)
    mystery = kernels[3]
    assert mystery.flops == pytest.approx(2 * 64)  # an FMA is 2 FLOPs


def test_ncu_details_csv_units():
    kernels = parse_ncu_csv(FIX / "ncu_details_handwritten.csv")
    assert len(kernels) == 2
    fprop, add = kernels
    assert fprop.dram_bytes == pytest.approx(1310.72e3 + 2.10e6)  # Kbyte + Mbyte
    assert add.time_s == pytest.approx(7.2e-6)  # "7,200" nsecond
    assert add.flops == pytest.approx(1_048_576)


def test_measured_bytes_attach_to_trace_rows():
    ncu = parse_ncu_csv(FIX / "ncu_raw_handwritten.csv")
    rep = build_report(TRACE, GPU_TABLE["H100 SXM"], ncu=ncu)
    rows = {r.op: r for r in rep.rows}
    assert rows["aten::conv2d"].measured_bytes == pytest.approx(3.41e6)
    assert rows["aten::convolution_backward"].measured_bytes == pytest.approx(
        (2.25 + 1.05 + 3.15 + 0.15) * 1e6)
    assert rows["aten::convolution_backward"].measured_flops == pytest.approx(2 * CONV_FLOPS)
    # measured bytes exceed the minimal count for the add (it is a lower bound)
    assert rows["aten::add_"].measured_bytes >= rows["aten::add_"].bytes * 0.99


def test_ncu_only_report():
    rep = ncu_report(parse_ncu_csv(FIX / "ncu_raw_handwritten.csv"), GPU_TABLE["H100 SXM"], "x")
    assert len(rep.rows) == 6
    assert rep.totals["op_time_us"] == pytest.approx(48.64 + 7.2 + 5.9 + 3.1 + 50.1 + 52.3)
    assert rep.totals["matmul_conv_flops"] == pytest.approx(3 * CONV_FLOPS)


def test_ncu_bad_file(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("hello,world\n1,2\n")
    with pytest.raises(NcuError, match="ncu --csv"):
        parse_ncu_csv(bad)
    with pytest.raises(NcuError, match="no such file"):
        parse_ncu_csv(tmp_path / "missing.csv")


def test_own_kernel_formulas_load_in_a_fresh_process():
    # The CLI runs in a process that never imported our kernels: the formulas
    # of the dawnbench:: custom ops must still be there.
    import importlib.util
    import subprocess
    import sys
    from importlib.metadata import entry_points

    from dawnbench_fast.roofline.registry import ENTRY_POINT_GROUP

    present = [ep.module for ep in entry_points(group=ENTRY_POINT_GROUP)
               if importlib.util.find_spec(ep.module) is not None]
    if not present:
        pytest.skip("no kernel backend with cost formulas in this install")
    code = ("from dawnbench_fast.roofline import registry; "
            "print(sum(o.startswith('dawnbench::') for o in registry.registered_ops()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) >= len(present)
