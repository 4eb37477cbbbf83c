"""The GPU peak table (dawnbench_fast.roofline.peaks) matches device names
exactly as NVML and CUDA report them, and scales its FLOP/s to the maximum SM
clock NVML measures, saying so in the report. A stand-in pynvml
(tests/support/fake_pynvml.py) plays each GPU; this machine has none.

Where each name string comes from (the name as the driver reports it:
nvidia-smi's "Name", NVML's nvmlDeviceGetName, torch.cuda.get_device_name):

- All but one are rows of the "Compatible GPUs" table of NVIDIA's driver
  README (NVIDIA/open-gpu-kernel-modules, README.md, release 550.40.82),
  which lists each product name with its PCI ID: "NVIDIA H100 80GB HBM3"
  (2330), "NVIDIA H100 PCIe" (2331), "NVIDIA H100 NVL" (2321),
  "NVIDIA H100" (2339, a variant the table does not hold), "NVIDIA H200"
  (2335), "NVIDIA A100-SXM4-40GB" (20B0), "NVIDIA A100-SXM4-80GB" (20B2),
  "NVIDIA A100-PCIE-40GB" (20F1), "NVIDIA A100 80GB PCIe" (20B5),
  "NVIDIA L4" (27B8), "NVIDIA A10" (2236), "NVIDIA L40S", "NVIDIA H800 PCIe",
  "NVIDIA A800-SXM4-80GB".
- The same strings as users' machines printed them, in public issue threads:
  "NVIDIA H100 NVL" in nvidia-smi's table (NVIDIA/gpu-admin-tools#4, driver
  535.183.01; fastfetch-cli/fastfetch#1658 shows its 1785 MHz clock),
  "NVIDIA H100 80GB HBM3" from `nvidia-smi --query-gpu=name`
  (pytorch/test-infra#7631), "NVIDIA A100-SXM4-80GB" as `nvidia-smi -a`'s
  Product Name (NVIDIA/CUDALibrarySamples#104, driver 470.103.01),
  "NVIDIA A100-SXM4-40GB" as dcgm-exporter's modelName (NVIDIA/DCGM#149),
  "NVIDIA H100 PCIe" and "NVIDIA A100-PCIE-40GB" as torch's device name
  (zzc0721/torch-performance-test-data#95 and #108); the A100's 1410 MHz
  maximum SM clock from `nvidia-smi -q` (NVIDIA/nvidia-docker#1648).
- "A100-SXM4-40GB" without the "NVIDIA " prefix: drivers of the 450 series
  (pytorch/pytorch#57922, driver 450.80.02).

The maximum SM clocks given to the stand-in are the products' boost clocks
(docs/FACTS.md, "Device peaks").
"""

from __future__ import annotations

import pathlib
import sys

import pytest
from support.fake_pynvml import FakeGPU, FakeNVML

from dawnbench_fast.hardware import gpu_info
from dawnbench_fast.roofline.peak_choice import resolve_peaks
from dawnbench_fast.roofline.peaks import GPU_TABLE, detect_gpu, match_gpu, table_entry
from dawnbench_fast.roofline.report import build_report
from dawnbench_fast.roofline.text_report import render_text

# (name as NVML reports it, table entry, maximum SM clock in MHz as NVML reports it)
NAMES = [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 1980),
    ("NVIDIA H100 PCIe", "H100 PCIe", 1755),
    ("NVIDIA H100 NVL", "H100 NVL", 1785),
    ("NVIDIA H200", "H200", 1980),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB", 1410),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB", 1410),
    ("A100-SXM4-40GB", "A100 40GB", 1410),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe", 1410),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 1410),
    ("NVIDIA L4", "L4", 2040),
    ("NVIDIA A10", "A10", 1695),
]
TRACE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "roofline" / "cuda_trace_handwritten.json"


@pytest.fixture
def nvml(monkeypatch):
    """Install a stand-in pynvml answering for the given GPUs (None: no NVML library)."""

    def install(*gpus: FakeGPU, library: bool = True) -> None:
        monkeypatch.setitem(sys.modules, "pynvml", FakeNVML(list(gpus), library=library))
        gpu_info.nvml.cache_clear()

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)  # NVML names the GPU here
    yield install
    gpu_info.nvml.cache_clear()


@pytest.mark.parametrize("name, entry, max_mhz", NAMES)
def test_nvml_names_match_their_entry_exactly(name, entry, max_mhz):
    assert match_gpu(name).name == entry
    assert table_entry(name).name == entry


@pytest.mark.parametrize("name", ["NVIDIA H100", "NVIDIA H800 PCIe", "NVIDIA A800-SXM4-80GB",
                                  "NVIDIA L40S", "NVIDIA H100 80GB", "H100", "NVIDIA L4 24GB",
                                  "nvidia h100 80gb hbm3"])
def test_other_names_match_nothing(name):
    # a variant of a tabled GPU has other peaks: it is not read as the tabled one
    assert match_gpu(name) is None
    with pytest.raises(ValueError, match="not in the peak table"):
        table_entry(name)


def test_the_h100_nvl_is_not_read_as_the_sxm_part():
    nvl, sxm = match_gpu("NVIDIA H100 NVL"), match_gpu("NVIDIA H100 80GB HBM3")
    assert (nvl.name, sxm.name) == ("H100 NVL", "H100 SXM")
    assert nvl.bandwidth == pytest.approx(3.9e12) and sxm.bandwidth == pytest.approx(3.35e12)
    assert nvl.flops["bf16"] == pytest.approx(835.5e12) and sxm.flops["bf16"] == pytest.approx(989e12)


@pytest.mark.parametrize("name, entry, max_mhz", NAMES)
def test_detected_peaks_are_the_table_at_the_measured_max_sm_clock(nvml, name, entry, max_mhz):
    nvml(FakeGPU(name, max_mhz))
    table, p = GPU_TABLE[entry], detect_gpu()
    assert p.name == entry
    for prec, flops in table.flops.items():
        assert p.flops[prec] == pytest.approx(flops * max_mhz / table.clock_mhz[prec]), prec
    assert p.bandwidth == table.bandwidth  # the memory clock, not the SM's
    assert f"measured maximum SM clock (NVML) of {max_mhz} MHz" in p.notes


def test_hopper_tensor_figures_hold_below_the_max_clock(nvml):
    # NVIDIA's H100 SXM figures: CUDA cores at 1980 MHz, tensor cores at 1830 MHz
    nvml(FakeGPU("NVIDIA H100 80GB HBM3", 1980))
    p = detect_gpu()
    assert p.flops["fp32"] == pytest.approx(67e12)
    assert p.flops["bf16"] == pytest.approx(989e12 * 1980 / 1830)
    assert "bf16 x 1980/1830" in p.notes and "fp32 x 1980/1980" in p.notes


def test_a_gpu_capped_below_its_boost_clock_gets_lower_peaks(nvml):
    nvml(FakeGPU("NVIDIA A100-SXM4-80GB", 1275))
    p = detect_gpu()
    assert p.flops["bf16"] == pytest.approx(312e12 * 1275 / 1410)
    assert p.flops["fp32"] == pytest.approx(19.5e12 * 1275 / 1410)
    assert "x 0.904 for 1275 MHz" in p.source["bf16"]


def test_the_trace_gpu_is_scaled_only_by_a_clock_of_that_gpu(nvml):
    trace_device = [{"name": "NVIDIA H100 NVL", "totalGlobalMem": 99961274368}]
    nvml(FakeGPU("NVIDIA H100 NVL", 1785))
    assert resolve_peaks(on_gpu=True, trace_devices=trace_device).flops["fp32"] == pytest.approx(
        60e12 * 1785 / 1785)
    assert resolve_peaks(on_gpu=True, trace_devices=trace_device).flops["bf16"] == pytest.approx(
        835.5e12 * 1785 / 1545)
    # a trace from another machine: this one's GPU says nothing about that one's clock
    nvml(FakeGPU("NVIDIA A100-SXM4-80GB", 1410))
    p = resolve_peaks(on_gpu=True, trace_devices=trace_device)
    assert p.flops == GPU_TABLE["H100 NVL"].flops and "as tabled" in p.notes
    nvml(library=False)  # no NVML at all
    assert resolve_peaks(on_gpu=True, trace_devices=trace_device).flops == GPU_TABLE["H100 NVL"].flops
    # a table name given by hand is the table, unscaled
    assert resolve_peaks(device="H100 NVL").flops == GPU_TABLE["H100 NVL"].flops


def test_no_gpu_is_detected_without_nvml_or_with_an_unknown_one(nvml):
    nvml(library=False)
    assert detect_gpu() is None
    nvml(FakeGPU("NVIDIA H100", 1755))  # a variant the table does not hold
    assert detect_gpu() is None


def test_the_report_states_the_clock_it_scaled_to(nvml):
    nvml(FakeGPU("NVIDIA H100 80GB HBM3", 1755))  # the fixture trace's GPU, capped here
    text = render_text(build_report(TRACE))
    assert ("FLOP/s scaled to the measured maximum SM clock (NVML) of 1755 MHz (fp32 x 1755/1980"
            in text)
    assert "bf16: NVIDIA H100 datasheet, SXM5 (dense), at 1830 MHz, x 0.959 for 1755 MHz" in text
