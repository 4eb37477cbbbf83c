"""The GPU in run.json and the report (dawnbench_fast.hardware.gpu_info): name, driver,
clocks, power limit and the energy of the run, read through NVML, and
recorded as absent, never an error, without a GPU or NVML. A stand-in pynvml
(tests/support/fake_pynvml.py) answers for the GPU; this machine has none."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from support.cifar_data import cifar_dir
from support.fake_pynvml import FakeGPU, FakeNVML
from support.fake_task import FakeTimer

from dawnbench_fast import cifar
from dawnbench_fast.execution import runtime
from dawnbench_fast.hardware import gpu_info
from dawnbench_fast.reporting import bench
from dawnbench_fast.training.train import Phases

CUDA = torch.device("cuda:0")


@pytest.fixture
def install_nvml(monkeypatch):
    """Put a FakeNVML (or None: pynvml not installed) where ``import pynvml`` finds it."""

    def install(module: FakeNVML | None) -> FakeNVML | None:
        monkeypatch.setitem(sys.modules, "pynvml", module)
        gpu_info.nvml.cache_clear()
        return module

    yield install
    gpu_info.nvml.cache_clear()


def test_off_the_gpu_the_gpu_is_recorded_as_absent(install_nvml):
    install_nvml(FakeNVML([FakeGPU("NVIDIA H100 80GB HBM3", 1980)]))  # even with a GPU in the box
    cpu = torch.device("cpu")
    assert gpu_info.gpu_record(cpu) == {"present": False, "reason": "the run is on the CPU"}
    assert gpu_info.energy_reader(cpu) is None and gpu_info.clocks_now(cpu) is None


def test_without_pynvml_or_the_nvml_library_the_record_says_why(install_nvml, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA L4")
    install_nvml(None)  # `import pynvml` raises ImportError
    record = gpu_info.gpu_record(CUDA)
    assert record == {"present": True, "nvml": False, "name": "NVIDIA L4",
                      "reason": "pynvml is not installed (pip install nvidia-ml-py)"}
    install_nvml(FakeNVML([], library=False))  # the package, but no NVIDIA driver library
    assert gpu_info.gpu_record(CUDA)["reason"] == "NVML unavailable (NVMLError_LibraryNotFound)"
    assert gpu_info.energy_reader(CUDA) is None and gpu_info.clocks_now(CUDA) is None
    assert gpu_info.max_sm_clock_mhz() is None


def test_the_gpu_record_from_nvml(install_nvml):
    nv = install_nvml(FakeNVML([FakeGPU("NVIDIA H100 80GB HBM3", 1980, sm_mhz=1755, mem_mhz=2619,
                                        power_limit_mw=700_000)]))
    record = gpu_info.gpu_record(CUDA)
    assert record == {
        "present": True, "nvml": True, "name": "NVIDIA H100 80GB HBM3", "nvml_index": 0,
        "driver_version": "550.54.15", "cuda_driver_version": 12040,
        "clocks_mhz": {"sm": 1755, "memory": 2619}, "max_clocks_mhz": {"sm": 1980, "memory": 2619},
        "power_limit_w": 700.0, "memory_total_bytes": 80 * 2**30, "energy_counter": True,
    }
    assert json.loads(json.dumps(record)) == record  # plain JSON for run.json
    assert nv.inits == 1
    gpu_info.gpu_record(CUDA)
    assert nv.inits == 1  # NVML is initialised once per process


def test_the_nvml_index_follows_the_cuda_device(install_nvml, monkeypatch):
    install_nvml(FakeNVML([FakeGPU("NVIDIA A100-SXM4-80GB", 1410), FakeGPU("NVIDIA L4", 2040)]))

    def torch_mapping(device):  # torch's own CUDA -> NVML index (CUDA_VISIBLE_DEVICES), unusable here
        raise RuntimeError("no CUDA")

    monkeypatch.setattr(torch.cuda, "_get_nvml_device_index", torch_mapping)
    assert gpu_info.gpu_record(torch.device("cuda:1"))["name"] == "NVIDIA L4"
    monkeypatch.setattr(torch.cuda, "_get_nvml_device_index", lambda device: 0)  # e.g. CUDA_VISIBLE_DEVICES=0
    assert gpu_info.gpu_record(torch.device("cuda:0"))["name"] == "NVIDIA A100-SXM4-80GB"


def test_energy_is_read_in_joules_where_the_gpu_counts_it(install_nvml):
    gpu = FakeGPU("NVIDIA H100 80GB HBM3", 1980, energy_mj=5_000_000)
    install_nvml(FakeNVML([gpu]))
    read = gpu_info.energy_reader(CUDA)
    assert read() == 5000.0
    gpu.energy_mj += 250_500  # mJ
    assert read() == pytest.approx(5250.5)
    install_nvml(FakeNVML([FakeGPU("Tesla P100-PCIE-16GB", 1329, energy_mj=None)]))  # no counter
    assert gpu_info.energy_reader(CUDA) is None
    assert gpu_info.gpu_record(CUDA)["energy_counter"] is False


def test_phases_count_the_joules_of_each_phase():
    timer, joules = FakeTimer(), [1000.0]
    phases = Phases(torch.device("cpu"), timer=timer, energy=lambda: joules[0])
    for name, seconds, watts in (("warmup", 2.0, 100.0), ("init", 1.0, 50.0), ("train", 4.0, 300.0),
                                 ("checkpoint", 0.5, 80.0), ("eval", 1.0, 200.0), ("train", 4.0, 300.0)):
        with phases.timed(name):
            timer.advance(seconds)
            joules[0] += seconds * watts
    assert phases.joules == {"warmup": 200.0, "init": 50.0, "train": 2400.0, "checkpoint": 40.0,
                             "eval": 200.0}
    assert phases.clock_joules == 50.0 + 2400.0 + 200.0  # init + train + eval
    assert Phases(torch.device("cpu")).clock_joules is None


def test_run_json_and_the_report_carry_the_gpu_and_its_energy(monkeypatch, tmp_path, capsys):
    # the CPU run stands in for a GPU one: NVML's answers are faked at gpu_info's surface
    record = {"present": True, "nvml": True, "name": "NVIDIA H100 80GB HBM3", "nvml_index": 0,
              "driver_version": "550.54.15", "cuda_driver_version": 12040,
              "clocks_mhz": {"sm": 345, "memory": 2619}, "max_clocks_mhz": {"sm": 1980, "memory": 2619},
              "power_limit_w": 700.0, "memory_total_bytes": 80 * 2**30, "energy_counter": True}
    counter = [0.0]

    def energy() -> float:  # 250 J at every reading: each phase draws 250 J
        counter[0] += 250.0
        return counter[0]

    monkeypatch.setattr(gpu_info, "gpu_record", lambda device: record)
    monkeypatch.setattr(gpu_info, "energy_reader", lambda device: energy)
    monkeypatch.setattr(gpu_info, "clocks_now", lambda device: {"sm": 1980, "memory": 2619})
    threads = torch.get_num_threads()
    try:
        code = cifar.main(["--subset", "64", "--batch-size", "32", "--eval-subset", "100", "--epochs", "1",
                           "--set", "widths=8,8,8", "--set", "whiten_images=64", "--latency-images", "2",
                           "--no-progress", "--no-download", "--threads", "1", "--data-dir", str(cifar_dir()),
                           "--out", str(tmp_path / "run")])
    finally:
        runtime.set_threads(threads)
    assert code == 0
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["gpu"] == record
    result = run["result"]
    energy_j = result["gpu_energy_joules"]
    # phases read the counter before and after: 250 J each; the run, from its start to the latency
    assert energy_j["phases"] == {k: 250.0 for k in ("warmup", "init", "train", "eval", "epoch_log",
                                                      "checkpoint", "latency")}
    assert energy_j["clock"] == 750.0
    assert energy_j["run"] == 250.0 * (2 * 7 + 1)  # 7 phases of 2 readings each, then the end
    assert result["gpu_clocks_mhz_after"] == {"sm": 1980, "memory": 2619}
    out = capsys.readouterr().out
    assert ("GPU: NVIDIA H100 80GB HBM3, driver 550.54.15, max clocks SM 1980 MHz / memory 2619 MHz, "
            "power limit 700 W") in out
    assert "GPU energy: 3.75 kJ per run (0.0010 kWh; 0.75 kJ on the clock)" in out
    page = (tmp_path / "run" / "report.html").read_text()
    assert "GPU energy per run: seed 0: 3.75 kJ (0.75 kJ on the clock)" in page
    assert "max clocks SM 1980 MHz" in page
    # without a GPU (this machine as it is) the same keys say absent, and the report has no GPU lines
    assert "GPU" not in bench.report_text([{**result, "gpu_energy_joules": None}], cifar.Config(),
                                          None, "cpu", "cpu", gpu={"present": False})
