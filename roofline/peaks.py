"""Device peaks: a table of datacenter GPUs (dense figures from NVIDIA's
datasheets), detection of the device, and a user override file. CPU peaks
measured on this machine are :mod:`cpu_peaks`; :mod:`peak_choice` picks one.

Units inside the tool: FLOP/s and bytes/s. Precision keys: ``fp32`` (CUDA
cores / CPU vector units), ``tf32``, ``fp16``, ``bf16`` (tensor cores / CPU
matrix units, dense, no sparsity).
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import asdict, dataclass, field, replace

T = 1e12


@dataclass
class Peaks:
    name: str
    flops: dict[str, float]  # precision -> FLOP/s
    bandwidth: float  # bytes/s
    kind: str = "gpu"  # "gpu" or "cpu"
    source: dict[str, str] = field(default_factory=dict)  # quantity -> where it comes from
    notes: str = ""
    # precision -> the SM clock (MHz) its FLOP/s figure holds at (GPU table entries):
    # FLOP/s is FLOP per clock times the clock, so a figure scales with it (at_sm_clock)
    clock_mhz: dict[str, float] = field(default_factory=dict)
    # the rates were measured on this machine (cpu_peaks), not read from the table or a file:
    # a roof such peaks put below what the step reaches was measured while the machine was busy
    measured: bool = False

    def roof(self, precision: str) -> tuple[str, float]:
        """(precision used, FLOP/s) of the compute roof for ``precision``,
        falling back fp16 -> bf16 -> fp32 (and tf32 -> fp32) when absent."""
        chain = {"fp16": ["fp16", "bf16", "fp32"], "bf16": ["bf16", "fp16", "fp32"],
                 "tf32": ["tf32", "fp32"], "fp8": ["fp8", "fp16", "bf16", "fp32"]}
        for p in chain.get(precision, [precision, "fp32"]):
            if self.flops.get(p):
                return p, self.flops[p]
        p, v = max(self.flops.items(), key=lambda kv: kv[1])
        return p, v

    def to_dict(self) -> dict:
        return asdict(self)


def _gpu(name: str, fp32: float, tf32: float | None, half: float, bf16: bool, bw_tbs: float,
         source: str, fp32_mhz: float, tensor_mhz: float | None = None) -> Peaks:
    """A table entry; ``fp32_mhz`` / ``tensor_mhz``: the SM clock NVIDIA's
    CUDA-core / tensor-core figures hold at (the same but on Hopper)."""
    flops = {"fp32": fp32 * T, "fp16": half * T}
    if tf32:
        flops["tf32"] = tf32 * T
    if bf16:
        flops["bf16"] = half * T
    src = {k: source for k in flops} | {"bandwidth": source}
    clocks = {k: fp32_mhz if k == "fp32" else (tensor_mhz or fp32_mhz) for k in flops}
    return Peaks(name, flops, bw_tbs * T, "gpu", src, clock_mhz=clocks)


# Dense peaks (tensor figures without sparsity; NVIDIA's datasheets print the
# sparse figure for Ampere and later, twice the dense one), and the SM clock
# each holds at (docs/FACTS.md, "Device peaks": the boost clock, which the
# CUDA-core figure gives as SMs x FLOP per clock x clock; Hopper's tensor-core
# figures hold at a lower clock than its CUDA-core ones).
GPU_TABLE: dict[str, Peaks] = {
    p.name: p
    for p in [
        _gpu("V100 SXM2", 15.7, None, 125, False, 0.90, "NVIDIA Tesla V100 datasheet (SXM2)", 1530),
        _gpu("T4", 8.1, None, 65, False, 0.32, "NVIDIA T4 datasheet", 1590),
        _gpu("A10", 31.2, 62.5, 125, True, 0.60, "NVIDIA A10 datasheet (dense)", 1695),
        _gpu("L4", 30.3, 60, 121, True, 0.30, "NVIDIA L4 datasheet (dense)", 2040),
        _gpu("A100 40GB", 19.5, 156, 312, True, 1.555, "NVIDIA A100 datasheet, SXM 40 GB (dense)", 1410),
        _gpu("A100 80GB", 19.5, 156, 312, True, 2.039, "NVIDIA A100 datasheet, SXM 80 GB (dense)", 1410),
        _gpu("A100 40GB PCIe", 19.5, 156, 312, True, 1.555, "NVIDIA A100 datasheet, PCIe 40 GB (dense)",
             1410),
        _gpu("A100 80GB PCIe", 19.5, 156, 312, True, 1.935, "NVIDIA A100 datasheet, PCIe 80 GB (dense)",
             1410),
        _gpu("H100 SXM", 67, 495, 989, True, 3.35, "NVIDIA H100 datasheet, SXM5 (dense)", 1980, 1830),
        _gpu("H100 PCIe", 51, 378, 756, True, 2.0, "NVIDIA H100 datasheet, PCIe (dense)", 1755, 1620),
        _gpu("H100 NVL", 60, 417.5, 835.5, True, 3.9, "NVIDIA H100 NVL datasheet (dense)", 1785, 1545),
        _gpu("H200", 67, 495, 989, True, 4.8, "NVIDIA H200 datasheet, SXM (dense)", 1980, 1830),
    ]
}

# Device names exactly as NVML and CUDA report them (nvidia-smi's "Name",
# torch.cuda.get_device_name, a profiler trace's deviceProperties) -> table
# entry. Exact, because the variants differ in the name's tail and in their
# peaks: "NVIDIA H100 NVL" and "NVIDIA H100 PCIe" are not the SXM part
# ("NVIDIA H100 80GB HBM3"). Names from NVIDIA's driver README, "Compatible
# GPUs" table (tests/roofline/test_roofline_gpu_names.py cites each); an unknown name
# matches nothing: pass --device NAME or --peaks FILE.
NVML_NAMES: dict[str, str] = {
    "Tesla V100-SXM2-16GB": "V100 SXM2",
    "Tesla T4": "T4",
    "NVIDIA A10": "A10",
    "NVIDIA L4": "L4",
    "NVIDIA A100-SXM4-40GB": "A100 40GB",
    "A100-SXM4-40GB": "A100 40GB",  # drivers before 470 left out the "NVIDIA " prefix
    "NVIDIA A100-SXM4-80GB": "A100 80GB",
    "NVIDIA A100-PCIE-40GB": "A100 40GB PCIe",
    "NVIDIA A100 80GB PCIe": "A100 80GB PCIe",
    "NVIDIA H100 80GB HBM3": "H100 SXM",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H200": "H200",
}


def match_gpu(device_name: str) -> Peaks | None:
    """The table entry for a device name exactly as NVML/CUDA reports it
    (e.g. ``"NVIDIA H100 80GB HBM3"``), or None."""
    key = NVML_NAMES.get(device_name.strip())
    return GPU_TABLE[key] if key is not None else None


def table_entry(name: str) -> Peaks:
    """A GPU table entry by (case-insensitive) table name or by a device name."""
    for key, p in GPU_TABLE.items():
        if key.lower() == name.lower().strip():
            return p
    p = match_gpu(name)
    if p is None:
        raise ValueError(
            f"--device {name!r}: not in the peak table; use one of "
            f"{', '.join(GPU_TABLE)} (or 'cpu', or --peaks FILE)"
        )
    return p


def at_sm_clock(p: Peaks, mhz: float, what: str) -> Peaks:
    """``p`` at an SM clock of ``mhz`` MHz (``what``: where that clock comes
    from, for the report): each FLOP/s figure times ``mhz`` / the clock it
    holds at. The bandwidth is kept: it follows the memory clock, not the SM's."""
    if not p.clock_mhz:
        return p
    flops, source, parts = dict(p.flops), dict(p.source), []
    for prec, base in p.clock_mhz.items():
        if prec in flops:
            flops[prec] = p.flops[prec] * mhz / base
            source[prec] = (f"{p.source.get(prec, '')}, at {base:.0f} MHz, x {mhz / base:.3f} "
                            f"for {mhz:.0f} MHz")
            parts.append(f"{prec} x {mhz:.0f}/{base:.0f}")
    notes = (f"FLOP/s scaled to the {what} of {mhz:.0f} MHz ({', '.join(parts)}: the table's figures "
             "hold at the second clock); bandwidth as tabled")
    return replace(p, flops=flops, source=source, notes=notes, clock_mhz=dict.fromkeys(p.clock_mhz, mhz))


def at_measured_clock(p: Peaks, device_name: str) -> Peaks:
    """``p`` scaled to the maximum SM clock NVML reports for the GPU named
    ``device_name`` on this machine (:func:`at_sm_clock`); as tabled, with a
    note saying so, where there is no such reading (no NVML, or the trace came
    from another machine)."""
    from dawnbench_fast.hardware.gpu_info import max_sm_clock_mhz

    reading = max_sm_clock_mhz(device_name)
    if reading is None or not p.clock_mhz:
        return replace(p, notes=f"FLOP/s as tabled: no NVML reading of a {device_name}'s maximum SM "
                       "clock here")
    return at_sm_clock(p, reading[1], "measured maximum SM clock (NVML)")


def detect_gpu() -> Peaks | None:
    """Peaks of the CUDA device this process sees (its name from torch, else
    NVML), scaled to its measured maximum SM clock; None without a GPU in the table."""
    name = None
    try:
        import torch

        if torch.cuda.is_available():
            name = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - no usable CUDA: try NVML, then give up
        pass
    if name is None:
        from dawnbench_fast.hardware.gpu_info import max_sm_clock_mhz

        reading = max_sm_clock_mhz()  # the first NVML GPU, if any
        name = reading[0] if reading else None
    p = match_gpu(name) if name else None
    return at_measured_clock(p, name) if p is not None else None


def load_peaks_file(path: str | pathlib.Path) -> Peaks:
    """Peaks from a JSON file, e.g.::

        {"name": "my box", "base": "H100 SXM",
         "tflops": {"bf16": 800, "fp32": 60}, "bandwidth_tbs": 3.0}

    ``base`` (optional) starts from a table entry; given fields replace its
    values. ``tflops`` (TFLOP/s per precision) and ``bandwidth_tbs`` (TB/s)
    or ``gflops`` / ``bandwidth_gbs`` for CPUs."""
    p = pathlib.Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"--peaks {p}: no such file; write a JSON like "
                         '{"name": "x", "tflops": {"fp32": 19.5}, "bandwidth_tbs": 1.5}') from None
    except json.JSONDecodeError as e:
        raise ValueError(f"--peaks {p}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"--peaks {p}: expected a JSON object with tflops/bandwidth_tbs")
    base = table_entry(data["base"]) if "base" in data else None
    flops = dict(base.flops) if base else {}
    source = dict(base.source) if base else {}
    for key, scale in (("tflops", 1e12), ("gflops", 1e9)):
        for prec, v in (data.get(key) or {}).items():
            flops[prec] = float(v) * scale
            source[prec] = f"user file {p}"
    bw = base.bandwidth if base else None
    for key, scale in (("bandwidth_tbs", 1e12), ("bandwidth_gbs", 1e9)):
        if key in data:
            bw = float(data[key]) * scale
            source["bandwidth"] = f"user file {p}"
    if not flops or bw is None:
        raise ValueError(f"--peaks {p}: needs at least one of tflops/gflops and one of "
                         "bandwidth_tbs/bandwidth_gbs (or a 'base' table entry)")
    kind = data.get("kind", base.kind if base else "gpu")
    return Peaks(data.get("name", base.name if base else p.stem), flops, bw, kind, source)
