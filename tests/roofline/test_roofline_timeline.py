"""The device timeline of a profiled step (roofline/timeline.py): kernel
time, GPU idle time between kernels, launches and each kernel's share,
checked against a hand count on a made-up trace, and written beside the
roofline report by profile_training."""

from __future__ import annotations

import json

import pytest

from dawnbench_fast.roofline.live import write_timeline
from dawnbench_fast.roofline.timeline import kernel_family, timeline
from dawnbench_fast.roofline.trace import parse_events


def _kernel(name: str, ts: float, dur: float, cat: str = "kernel") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {}}


def _runtime(name: str, ts: float) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "ts": ts, "dur": 1.0, "args": {}}


# Two steps, each one graph launch. Step 1: kernels at [100, 110), [108, 120)
# (overlapping), [125, 130); step 2 after a host gap: [200, 215), a copy [215, 220).
EVENTS = [
    _runtime("cudaGraphLaunch", 95), _runtime("cudaGraphLaunch", 190), _runtime("cudaLaunchKernel", 196),
    _kernel("void cutlass::Kernel2<cutlass_80_wmma_tensorop>(Params)", 100, 10),
    _kernel("triton_poi_fused_add_relu_3", 108, 12),
    _kernel("triton_poi_fused_add_relu_7", 125, 5),
    _kernel("void cutlass::Kernel2<cutlass_80_wmma_tensorop>(Params)", 200, 15),
    _kernel("Memcpy DtoD", 215, 5, cat="gpu_memcpy"),
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 90, "dur": 3, "args": {}},
]


def test_the_timeline_against_a_hand_count():
    line = timeline(parse_events(EVENTS), steps=2)
    # span 100 -> 220 = 120; busy [100, 120) + [125, 130) + [200, 220) = 20 + 5 + 20 = 45
    assert line.span_us == 120 and line.busy_us == 45 and line.idle_us == 75
    assert line.idle_share == pytest.approx(75 / 120)
    assert line.kernel_us == 10 + 12 + 5 + 15 + 5  # the overlapping pair counted each
    assert (line.activities, line.graph_launches, line.kernel_launches) == (5, 2, 1)
    shares = {name: (share, count) for name, share, count in line.shares}
    assert shares["cutlass::Kernel2"] == (pytest.approx(25 / 47), 2)
    assert shares["triton_poi_fused_add_relu"] == (pytest.approx(17 / 47), 2)
    assert line.shares[0][0] == "cutlass::Kernel2"  # largest first
    d = line.to_dict()
    assert d["per_step_us"] == {"span": 60, "busy": 22.5, "kernel": 23.5, "idle": 37.5}
    assert d["graph_launches_per_step"] == 1
    assert "GPU idle 0.037 ms (62.5% of the span)" in line.text()


def test_no_device_activity_gives_no_timeline_and_bad_steps_are_refused():
    assert timeline(parse_events([EVENTS[-1]]), steps=1) is None
    with pytest.raises(ValueError, match="at least 1"):
        timeline(parse_events(EVENTS), steps=0)


@pytest.mark.parametrize("name,family", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::Func>(int, Func)",
     "at::native::vectorized_elementwise_kernel"),
    ("triton_red_fused__native_batch_norm_legit_functional_12",
     "triton_red_fused__native_batch_norm_legit_functional"),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64",
     "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64"),
])
def test_kernel_family(name, family):
    assert kernel_family(name) == family


def test_write_timeline_beside_the_report(tmp_path):
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": EVENTS}))
    line = write_timeline(tmp_path, 2)
    saved = json.loads((tmp_path / "timeline.json").read_text())
    assert saved == json.loads(json.dumps(line.to_dict()))
    assert (tmp_path / "timeline.txt").read_text() == line.text()
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": [EVENTS[-1]]}))
    (tmp_path / "timeline.json").unlink()
    assert write_timeline(tmp_path, 2) is None and not (tmp_path / "timeline.json").exists()
