"""The roofline bound of every custom GPU op at the recipe's shapes, beside
torch's measured time and ours: where a win is possible, and how large.

    python -m tools.gpu_suite.bounds [--measured FILE] [--batch N] [--markdown]

A bound is max(bytes / DRAM bandwidth, FLOPs / tensor-core peak) on each GPU
of roofline/peaks.py named here (H100 SXM, H200). The bytes are what the
op's design must move at the least: for bn_act and bias_act its passes over
memory in bf16 (bn_act: forward 3 = statistics read, normalise read + write;
backward 5 = reduce reads x and dy, apply reads both and writes dx; the
compulsory floor, each tensor once, is 5), for the conv group its inputs,
weights and outputs once per pass; the FLOPs are 2 x MAC. ``--measured``
takes a pytest-benchmark JSON of benchmarks/bench_triton_kernels.py and
bench_csrc_gpu.py (default: the one H100 run, batch 2000) or the GPU suite's
suite.json (its ops part, the recipe's batch); rows it did not measure show
the bound alone.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from dawnbench_fast.cifar.recipe import CifarRecipe
from dawnbench_fast.roofline.peaks import table_entry

ROOT = Path(__file__).resolve().parents[2]  # the checkout, whose docs/results hold the default

DEFAULT_MEASURED = ROOT / "docs/results/gpu-h100/bench_kernels_2026-11-23.json"
GPUS = ("H100 SXM", "H200")
BF16 = 2  # bytes


@dataclass
class Row:
    op: str
    shape: str
    flops: float
    nbytes: float
    keys: tuple[str, ...]  # the names it was measured under (benchmark group, suite case)
    note: str = ""


def rows(batch: int) -> list[Row]:
    """Every custom GPU op at the default recipe's shapes with ``batch`` images."""
    r = CifarRecipe()
    w0, w1, w2 = r.widths
    act = r.act  # the GPU suite names its cases by the recipe's activation (gpu_suite/ops.py cases)
    out = [Row("augment", f"b={batch} 32x32x3 u8 -> bf16", 0.0, batch * 3 * 32 * 32 * (1 + BF16),
               ("augment -> bf16, batch {b}", "augment b={b} from 50000 images"), "crop read + bf16 write")]
    bn_shapes = ((w0, 15), (w1, 7), (w2, 3))
    for c, s in bn_shapes:
        n = batch * c * s * s
        out.append(Row("bn_act", f"C={c} @{s}px fwd+bwd", 30.0 * n, 8 * BF16 * n,
                       (f"bn_act fwd+bwd C={c} @{s}px", f"bn_act fwd+bwd {act} C={c} @{s}px b={{b}}"),
                       f"floor (each tensor once) {5 * BF16 * n / 1e6:.0f} MB"))
    six = sum(2 * batch * c * s * s for c, s in bn_shapes)  # the net's six BN layers, two per shape
    out.append(Row("bn_act", "the net's 6 BN layers fwd+bwd", 30.0 * six, 8 * BF16 * six,
                   ("bn_act fwd+bwd gelu bf16 channels_last, batch {b}",)))
    for c, s in bn_shapes:
        n = batch * c * s * s
        out.append(Row("bias_act", f"C={c} @{s}px fwd+bwd", 20.0 * n, 5 * BF16 * n,
                       (f"bias_act fwd+bwd {act} C={c} @{s}px b={{b}}",), "in no model"))
    for cin, cout, h in ((24, w0, 31), (w0, w1, 15), (w1, w2, 7)):
        p = h // 2
        macs = batch * (h * h * cin * cout + p * p * cout * cout) * 9
        acts = batch * (h * h * cin + 2 * h * h * cout + 3 * p * p * cout)  # x, conv1 out + grad, pooled
        name = f"conv_group fwd+bwd {cin}->{cout} @{h}px"
        out.append(Row("conv_group", f"{cin}->{cout} @{h}px fwd+bwd", 3 * 2 * macs, 3 * BF16 * acts,
                       (name, name + " b={b}")))
    for m, k in ((w0, 9 * 24), (w1, 9 * w0), (w2, 9 * w1)):  # the filter banks, flattened
        ns_flops = 3 * (4 * m * m * k + 2 * m ** 3)  # 3 quintic steps: X X^T, A^2, (bA + cA^2) X
        ns_bytes = 3 * BF16 * (4 * m * k + 3 * m * m)
        out.append(Row("newton_schulz", f"{m}x{k} (3 steps)", ns_flops, ns_bytes,
                       (f"newton_schulz {m}x{k}",), "9 dependent GEMMs: latency-bound"))
        out.append(Row("matmul", f"X X^T {m}x{k}", 2 * m * m * k, BF16 * (2 * m * k + m * m),
                       (f"gemm {m}x{k}x{m}", f"matmul {m}x{k} @ {k}x{m}")))
    head_bytes = BF16 * (batch * w2 + 10 * w2 + batch * 10)
    out.append(Row("linear", f"head {batch}x{w2} -> 10", 2 * batch * w2 * 10, head_bytes,
                   (f"gemm {batch}x{w2}x10", f"linear (head) {batch}x{w2} -> 10")))
    n = 4096
    out.append(Row("gemm (mma.sync)", "4096^3 bf16", 2 * n ** 3, 3 * BF16 * n * n, ("gemm 4096^3 bfloat16",),
                   "not catalogued: cuBLAS serves matmul"))
    return out


def _impl(name: str) -> str:
    tail = re.search(r"\[([^\]]*)\]$", name).group(1).split("-")
    if "csrc" in tail and "extension" in tail:
        return "cuda"
    return next((t for t in reversed(tail) if t in ("torch", "triton", "cuda")), tail[-1])


TIMES = {"wall": "median_ms", "kernel": "kernel_ms"}  # --times: the suite's field of each


def measured(path: Path, times_of: str = "wall") -> tuple[dict[str, dict[str, float]], int, str]:
    """({benchmark group or suite case: {impl: us}}, batch, source) of a
    pytest-benchmark JSON (medians) or a suite.json: its eager medians
    (``wall``, host included) or its kernels' time a call (``kernel``, the
    profiler's sum, in suites since 2026-11-26)."""
    data = json.loads(path.read_text())
    times: dict[str, dict[str, float]] = {}
    if "benchmarks" in data:
        for b in data["benchmarks"]:
            impl = _impl(b["name"])
            if impl in ("torch", "triton", "cuda"):
                times.setdefault(b["group"], {})[impl] = b["stats"]["median"] * 1e6
        batch = int(next((m.group(1) for g in times if (m := re.search(r"batch (\d+)", g))), 2000))
        device = next((b["extra_info"]["device"] for b in data["benchmarks"]
                       if "device" in b["extra_info"]), "GPU")
        return times, batch, f"{path.name} ({device})"
    field = TIMES[times_of]
    for c in (data.get("parts", {}).get("ops") or {}).get("cases", []):
        if c.get(field) is not None:
            impl = "torch.compile" if c["impl"].startswith("torch.compile") else c["impl"]
            times.setdefault(c["case"], {})[impl] = c[field] * 1e3
    gpu = (data.get("environment", {}).get("gpu") or {}).get("name", "GPU")
    return times, CifarRecipe().batch_size, f"{path.name} ({gpu})"


def bound_us(row: Row, gpu: str) -> tuple[float, str]:
    p = table_entry(gpu)
    mem, comp = row.nbytes / p.bandwidth, row.flops / p.roof("bf16")[1]
    return max(mem, comp) * 1e6, "memory" if mem >= comp else "compute"


def bound_gpu(source: str) -> str:
    """The GPU of GPUS whose bound the measured times are held against: the
    H200 where the source names one, else the H100 SXM."""
    return "H200" if "H200" in source else "H100 SXM"


def table(batch: int, times: dict[str, dict[str, float]], against: str = "H100 SXM") -> list[str]:
    head = ("| op | shape | MB | GFLOP | bound " + " | bound ".join(GPUS) + " | torch | torch.compile"
            f" | Triton | CUDA C++ | best ours / torch | best ours / {against} bound | note |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows(batch):
        got = next((times[k.format(b=batch)] for k in row.keys if k.format(b=batch) in times), {})
        bounds = [bound_us(row, g) for g in GPUS]
        cells = [f"{b:.1f} us ({kind[0]})" for b, kind in bounds]
        ours = [got[k] for k in ("triton", "cuda") if k in got]
        ratio = f"{min(ours) / got['torch']:.2f}" if ours and "torch" in got else ""
        vs_bound = f"{min(ours) / bounds[GPUS.index(against)][0]:.1f}x" if ours else ""
        shown = [f"{got[k]:.1f} us" if k in got else "" for k in ("torch", "torch.compile", "triton", "cuda")]
        lines.append(f"| {row.op} | {row.shape} | {row.nbytes / 1e6:.1f} | {row.flops / 1e9:.2f} | "
                     + " | ".join(cells + shown) + f" | {ratio} | {vs_bound} | {row.note} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measured", type=Path, default=DEFAULT_MEASURED,
                    help="pytest-benchmark JSON or suite.json (default: the 2026-11-23 H100 run)")
    ap.add_argument("--batch", type=int, help="batch of the bounds (default: the measured one's)")
    ap.add_argument("--times", choices=tuple(TIMES), default="wall",
                    help="a suite.json's eager medians (wall, host included) or its kernels' time a call")
    args = ap.parse_args(argv)
    if not args.measured.is_file():
        print(f"--measured {args.measured}: no such file; give a pytest-benchmark JSON or a suite.json",
              file=sys.stderr)
        return 2
    times, batch, source = measured(args.measured, args.times)
    batch = args.batch or batch
    print(f"Bounds at batch {batch}, bf16 (b/w and peak: roofline/peaks.py); measured: {source}, "
          f"{args.times} times\n")
    print("\n".join(table(batch, times, bound_gpu(source))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
