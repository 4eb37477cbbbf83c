"""The GPU a run used, as NVML (pynvml, from the nvidia-ml-py package) reports
it: name, driver, clocks, power limit, and the energy the run drew.

run.json records it (``gpu``, ``result.gpu_energy_joules``) beside the CPU
that ``machine`` describes, because a GPU's speed is only comparable with its
clocks and power limit known (a cloud instance may cap either), and joules per
run are a cost like dollars per run. The roofline scales its peak table to the
measured maximum SM clock (``dawnbench_fast.roofline.peaks``).

Without a GPU, without the NVML library (a machine with no NVIDIA driver:
pynvml raises NVMLError_LibraryNotFound) or where a GPU does not support a
query (the energy counter needs Volta or later), the record says so and the
value is null: never an error.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


@functools.lru_cache(maxsize=1)
def nvml() -> tuple[Any, str | None]:
    """(the initialised pynvml module, None), or (None, why not). Initialised
    once per process and left open: NVML's init is reference-counted and the
    process ends soon enough."""
    try:
        import pynvml
    except ImportError:
        return None, "pynvml is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML unavailable ({type(e).__name__})"
    return pynvml, None


def nvml_index(device: torch.device) -> int:
    """NVML's index of a CUDA device: NVML counts every GPU of the machine,
    CUDA only those CUDA_VISIBLE_DEVICES lets through (torch's own mapping)."""
    try:
        return int(torch.cuda._get_nvml_device_index(device))
    except Exception:  # noqa: BLE001 - an older torch, or CUDA_VISIBLE_DEVICES unparsable
        return device.index or 0


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _query(fn: Callable[[], Any], scale: float = 1.0) -> Any:
    """``fn()`` (times ``scale`` for numbers), or None where the GPU or driver
    does not support the query."""
    try:
        value = fn()
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported, NoPermission, ...
        return None
    return value * scale if isinstance(value, int | float) and scale != 1.0 else value


def gpu_record(device: torch.device) -> dict[str, object]:
    """run.json's ``gpu``: ``{"present": false, "reason"}`` off the GPU; on
    one without NVML its name (torch's) and why NVML is absent; else its name,
    NVML index, driver and CUDA driver versions, clocks (MHz: SM and memory,
    current and maximum), power limit (W, the enforced one) and total memory."""
    if device.type != "cuda":
        return {"present": False, "reason": f"the run is on the {device.type.upper()}"}
    nv, why = nvml()
    if nv is None:
        return {"present": True, "nvml": False, "reason": why, "name": torch.cuda.get_device_name(device)}
    index = nvml_index(device)
    h = nv.nvmlDeviceGetHandleByIndex(index)
    sm, mem = nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM
    return {
        "present": True,
        "nvml": True,
        "name": _text(nv.nvmlDeviceGetName(h)),
        "nvml_index": index,
        "driver_version": _query(lambda: _text(nv.nvmlSystemGetDriverVersion())),
        "cuda_driver_version": _query(nv.nvmlSystemGetCudaDriverVersion),
        "clocks_mhz": clocks_mhz(nv, h),
        "max_clocks_mhz": {"sm": _query(lambda: nv.nvmlDeviceGetMaxClockInfo(h, sm)),
                           "memory": _query(lambda: nv.nvmlDeviceGetMaxClockInfo(h, mem))},
        "power_limit_w": _query(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h), 1e-3),
        "memory_total_bytes": _query(lambda: nv.nvmlDeviceGetMemoryInfo(h).total),
        "energy_counter": _query(lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h)) is not None,
    }


def clocks_mhz(nv: Any, handle: Any) -> dict[str, int | None]:
    """The SM and memory clocks now, MHz (what the GPU runs at this moment:
    idle clocks before a run, boost or throttled ones right after it)."""
    return {"sm": _query(lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
            "memory": _query(lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_MEM))}


def clocks_now(device: torch.device) -> dict[str, int | None] | None:
    """:func:`clocks_mhz` of ``device``; None off the GPU or without NVML."""
    nv, _ = nvml() if device.type == "cuda" else (None, None)
    if nv is None:
        return None
    return clocks_mhz(nv, nv.nvmlDeviceGetHandleByIndex(nvml_index(device)))


def max_sm_clock_mhz(device_name: str | None = None) -> tuple[str, float] | None:
    """(name, maximum SM clock in MHz) of the first NVML GPU (of the one named
    ``device_name``, if given), or None: what the roofline scales its peaks by."""
    nv, _ = nvml()
    if nv is None:
        return None
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = _text(nv.nvmlDeviceGetName(h))
            if device_name is None or name == device_name:
                mhz = _query(lambda h=h: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
                return (name, float(mhz)) if mhz else None
    except Exception:  # noqa: BLE001 - NVML answered init but not this
        return None
    return None


def energy_reader(device: torch.device) -> Callable[[], float] | None:
    """A function giving the GPU's energy counter in joules (NVML's total
    energy since the driver loaded; the difference of two readings is the
    energy drawn between them), or None off the GPU, without NVML or where the
    GPU has no counter (before Volta)."""
    nv, _ = nvml() if device.type == "cuda" else (None, None)
    if nv is None:
        return None
    h = nv.nvmlDeviceGetHandleByIndex(nvml_index(device))
    if _query(lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h)) is None:
        return None
    return lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0  # mJ -> J
