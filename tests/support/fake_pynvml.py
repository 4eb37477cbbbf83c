"""A stand-in for pynvml (nvidia-ml-py) with the calls dawnbench_fast makes,
answering for GPUs described here, so that the GPU record, the energy and the
clock-scaled peaks are tested without a GPU. Install it with
``monkeypatch.setitem(sys.modules, "pynvml", FakeNVML([...]))`` and clear
``dawnbench_fast.hardware.gpu_info.nvml``'s cache around it (the ``fake_nvml`` fixture
of the tests does both)."""

from __future__ import annotations

import types
from dataclasses import dataclass


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's names
    pass


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    pass


@dataclass
class FakeGPU:
    """One GPU as NVML would describe it (clocks MHz, power mW, energy mJ)."""

    name: str
    max_sm_mhz: int
    max_mem_mhz: int = 2619
    sm_mhz: int = 345  # idle
    mem_mhz: int = 2619
    power_limit_mw: int = 700_000
    energy_mj: int | None = 1_000_000  # None: no energy counter (before Volta)
    memory_total: int = 80 * 2**30


class FakeNVML(types.ModuleType):
    NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2  # pynvml's values
    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound

    def __init__(self, gpus: list[FakeGPU], library: bool = True, driver: str = "550.54.15"):
        super().__init__("pynvml")
        self.gpus, self.library, self.driver = gpus, library, driver
        self.inits = 0

    def nvmlInit(self) -> None:
        if not self.library:  # what pynvml raises on a machine without the NVIDIA driver
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return self.driver.encode()  # older pynvml versions return bytes

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGPU:
        return self.gpus[i]

    def nvmlDeviceGetName(self, h: FakeGPU) -> str:
        return h.name

    def nvmlDeviceGetClockInfo(self, h: FakeGPU, kind: int) -> int:
        return h.sm_mhz if kind == self.NVML_CLOCK_SM else h.mem_mhz

    def nvmlDeviceGetMaxClockInfo(self, h: FakeGPU, kind: int) -> int:
        return h.max_sm_mhz if kind == self.NVML_CLOCK_SM else h.max_mem_mhz

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGPU) -> int:
        return h.power_limit_mw

    def nvmlDeviceGetMemoryInfo(self, h: FakeGPU) -> types.SimpleNamespace:
        return types.SimpleNamespace(total=h.memory_total)

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGPU) -> int:
        if h.energy_mj is None:
            raise NVMLError_NotSupported("Not Supported")
        return h.energy_mj
