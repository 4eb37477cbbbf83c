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
from dataclasses import asdict, dataclass, field

T = 1e12


@dataclass
class Peaks:
    name: str
    flops: dict[str, float]  # precision -> FLOP/s
    bandwidth: float  # bytes/s
    kind: str = "gpu"  # "gpu" or "cpu"
    source: dict[str, str] = field(default_factory=dict)  # quantity -> where it comes from
    notes: str = ""

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
         source: str) -> Peaks:
    flops = {"fp32": fp32 * T, "fp16": half * T}
    if tf32:
        flops["tf32"] = tf32 * T
    if bf16:
        flops["bf16"] = half * T
    src = {k: source for k in flops} | {"bandwidth": source}
    return Peaks(name, flops, bw_tbs * T, "gpu", src)


# Dense peaks (tensor figures without sparsity; NVIDIA's datasheets print the
# sparse figure for Ampere and later, twice the dense one).
GPU_TABLE: dict[str, Peaks] = {
    p.name: p
    for p in [
        _gpu("V100 SXM2", 15.7, None, 125, False, 0.90, "NVIDIA Tesla V100 datasheet (SXM2)"),
        _gpu("T4", 8.1, None, 65, False, 0.32, "NVIDIA T4 datasheet"),
        _gpu("A10", 31.2, 62.5, 125, True, 0.60, "NVIDIA A10 datasheet (dense)"),
        _gpu("L4", 30.3, 60, 121, True, 0.30, "NVIDIA L4 datasheet (dense)"),
        _gpu("A100 40GB", 19.5, 156, 312, True, 1.555, "NVIDIA A100 datasheet, SXM 40 GB (dense)"),
        _gpu("A100 80GB", 19.5, 156, 312, True, 2.039, "NVIDIA A100 datasheet, SXM 80 GB (dense)"),
        _gpu("H100 SXM", 67, 495, 989, True, 3.35, "NVIDIA H100 datasheet, SXM5 (dense)"),
        _gpu("H100 PCIe", 51, 378, 756, True, 2.0, "NVIDIA H100 datasheet, PCIe (dense)"),
        _gpu("H200", 67, 495, 989, True, 4.8, "NVIDIA H200 datasheet, SXM (dense)"),
    ]
}


def match_gpu(device_name: str, total_memory_bytes: float | None = None) -> Peaks | None:
    """The table entry for a device name as CUDA/NVML reports it
    (e.g. ``"NVIDIA H100 80GB HBM3"``), or None."""
    n = device_name.upper().replace("-", " ")
    gib = (total_memory_bytes or 0) / 2**30
    if "H200" in n:
        return GPU_TABLE["H200"]
    if "H100" in n:
        return GPU_TABLE["H100 PCIe" if "PCIE" in n else "H100 SXM"]
    if "A100" in n:
        big = "80GB" in n.replace(" ", "") or gib > 60
        return GPU_TABLE["A100 80GB" if big else "A100 40GB"]
    if "V100" in n:
        return GPU_TABLE["V100 SXM2"]
    if "A10" in n.split() or n.endswith(" A10") or "A10 " in n + " " and "A100" not in n:
        return GPU_TABLE["A10"]
    if " T4" in " " + n:
        return GPU_TABLE["T4"]
    if " L4" in " " + n and "L40" not in n:
        return GPU_TABLE["L4"]
    return None


def table_entry(name: str) -> Peaks:
    """A GPU table entry by (case-insensitive) name or by a device name."""
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


def detect_gpu() -> Peaks | None:
    """Peaks of the CUDA device this process sees (torch, else NVML), or None."""
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            return match_gpu(props.name, props.total_memory)
    except Exception:  # noqa: BLE001 - no usable CUDA: try NVML, then give up
        pass
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else name
        mem = pynvml.nvmlDeviceGetMemoryInfo(h).total
        return match_gpu(name, mem)
    except Exception:  # noqa: BLE001 - NVML absent (CPU-only machines)
        return None


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
