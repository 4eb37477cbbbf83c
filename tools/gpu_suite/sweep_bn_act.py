"""Tune bn_act's GPU launch configurations in one command: try each, time it,
write the table, name the winners (a GPU machine reached by a command
runner is not under your hands between commands, so the whole sweep is one
run).

    python -m tools.gpu_suite.sweep_bn_act --out DIR [--batch N] [--dry-run]

Sweeps, at the recipe's three BN shapes (bf16 channels_last, GELU, forward +
backward with a given gradient, as the GPU suite's ops part times them):
- Triton (kernels/bn_act.py): rows and channels per tile and warps of the
  element-wise and reduction kernels (kernels/launches.py: ``ew_rows``,
  ``block_c``; kernels/bn_act.py: ``WARPS``); then, at the default tiles, the reductions'
  programs (``REDUCTION_PROGRAMS``, the rows of the partial tables) and the
  finalize kernels' tile (kernels/bn_act.py ``FINALIZE_*``: the tall 512 x 16
  tile against the 64 x 64 one with 4 warps that it replaced, unmeasured);
- CUDA C++ (csrc/bn_act.cu's tiled kernels): the partition cap and the
  elements per partition (csrc/engine.py: ``TILE_PARTITIONS_MAX``,
  ``TILE_ELEMENTS``).
DIR/sweep.json holds every row (kernel ms per shape, their sum) and the
winner of each face; DIR/sweep.md the table. Put the winners into those
constants (they are the defaults every run takes). ``--dry-run`` goes
through every configuration once on the CPU (Triton's interpreter, the C++
build's CPU loops for the CUDA face) at a tiny batch, timing nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

if "--dry-run" in sys.argv[1:]:  # before anything imports triton, which reads it once
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

from dawnbench_fast import dispatch  # noqa: E402
from dawnbench_fast.cifar.recipe import CifarRecipe  # noqa: E402
from tools.gpu_suite.sweeps import patched, refusal, write_record  # noqa: E402

TRITON_GRID = {"rows": (32, 64, 128), "block_c": (32, 64, 128), "warps": (4, 8)}
# one structural change at a time from the defaults (a row each)
TRITON_PROGRAMS = (256, 1024)
TRITON_FINALIZE = {"64x64 w4": {"FINALIZE_ROWS": 64, "FINALIZE_TILE": 4096, "FINALIZE_WARPS": 4}}
CUDA_GRID = {"partitions_max": (132, 264, 528, 1056), "elements": (16384, 32768, 65536)}


@contextmanager
def _tiles(rows: int, bc: int, warps: int) -> Iterator[None]:
    from dawnbench_fast.kernels import bn_act, launches

    with patched(launches, ew_rows=lambda: rows,
                 block_c=lambda c: min(bc, launches.next_power_of_2(c))), patched(bn_act, WARPS=warps):
        yield


def triton_configs() -> Iterator[tuple[dict, Callable]]:
    from dawnbench_fast.kernels import bn_act, launches

    for rows, bc, warps in itertools.product(*TRITON_GRID.values()):
        cfg = {"rows": rows, "block_c": bc, "warps": warps}
        yield cfg, lambda r=rows, b=bc, w=warps: _tiles(r, b, w)
    for progs in TRITON_PROGRAMS:
        yield {"programs": progs}, lambda p=progs: patched(launches, REDUCTION_PROGRAMS=p)
    for name, values in TRITON_FINALIZE.items():
        yield {"finalize": name}, lambda v=values: patched(bn_act, **v)


def cuda_configs() -> Iterator[tuple[dict, Callable]]:
    from dawnbench_fast.csrc import engine

    for cap, elements in itertools.product(*CUDA_GRID.values()):
        yield ({"partitions_max": cap, "elements": elements},
               lambda c=cap, e=elements: patched(engine, TILE_PARTITIONS_MAX=c, TILE_ELEMENTS=e))


def shapes(batch: int) -> list[tuple[int, int, int]]:
    w0, w1, w2 = CifarRecipe().widths
    return [(batch, w0, 15), (batch, w1, 7), (batch, w2, 3)]


def _time(fn: Callable[[], object], dry_run: bool) -> float | None:
    """The call's kernel milliseconds (the profiler's sum of kernel durations,
    gpu_suite/ops.py): the tile configuration changes the kernels,
    and the eager wall time is the host's (H100, 2026-11-26: 1.2 ms of wall
    around 0.2 ms of kernels), which would rank the configurations by noise."""
    fn()
    if dry_run:
        return None
    from tools.gpu_suite.ops import kernel_time

    return float(kernel_time(fn, calls=20)["kernel_ms"])


def sweep_face(face: str, configs: Iterator[tuple[dict, Callable]], batch: int, device: torch.device,
               dry_run: bool) -> list[dict]:
    from dawnbench_fast.models.layers import BatchNorm

    fn = dispatch.get_op("bn_act", face)
    act = CifarRecipe().act  # the recipe's activation, as the GPU suite's cases use
    cases = []
    for n, c, s in shapes(batch):
        x = torch.randn(n, c, s, s, device=device).to(torch.bfloat16)
        x = x.contiguous(memory_format=torch.channels_last).requires_grad_(True)
        cases.append((f"C={c} @{s}px", x, torch.randn_like(x), BatchNorm(c).to(device)))
    rows = []
    for cfg, apply in configs:
        row = {"face": face, **cfg, "ms": {}}
        try:
            with apply():
                for name, x, g, bn in cases:
                    def step(x=x, g=g, bn=bn):
                        x.grad = None
                        fn(x, bn, act).backward(g)
                    row["ms"][name] = _time(step, dry_run)
            row["total_ms"] = None if dry_run else sum(row["ms"].values())
        except Exception as e:  # noqa: BLE001 - a configuration that fails is a row, not the end
            row["error"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def winners(rows: list[dict]) -> dict[str, dict]:
    out = {}
    for face in sorted({r["face"] for r in rows}):
        timed = [r for r in rows if r["face"] == face and r.get("total_ms") is not None]
        if timed:
            best = min(timed, key=lambda r: r["total_ms"])
            out[face] = {k: v for k, v in best.items() if k not in ("face", "ms")}
    return out


def markdown(rows: list[dict]) -> str:
    names = list(next((r["ms"] for r in rows if r["ms"]), {}))
    head = "| face | config | " + " | ".join(names) + " | total ms |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cfg = ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("face", "ms", "total_ms", "error"))
        cells = [f"{r['ms'][n]:.4f}" if r["ms"].get(n) is not None else "" for n in names]
        total = f"{r['total_ms']:.4f}" if r.get("total_ms") is not None else r.get("error", "")
        lines.append(f"| {r['face']} | {cfg} | " + " | ".join(cells) + f" | {total} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder of sweep.json and sweep.md")
    ap.add_argument("--batch", type=int, help="images a step (default: the recipe's; 4 in a dry run)")
    ap.add_argument("--dry-run", action="store_true", help="every configuration once on the CPU, untimed")
    args = ap.parse_args(argv)
    why = refusal("gpu_sweep_bn_act", args.dry_run)
    if why:
        print(why, file=sys.stderr)
        return 2
    device = torch.device("cpu" if args.dry_run else "cuda")
    batch = args.batch or (4 if args.dry_run else CifarRecipe().batch_size)
    faces = [("triton", triton_configs()), ("cpu" if args.dry_run else "cuda", cuda_configs())]
    rows = []
    for face, configs in faces:
        why = dispatch.unavailable_reason(face, device)
        if why is not None:
            print(f"{face}: skipped ({why})", flush=True)
            continue
        rows += sweep_face(face, configs, batch, device, args.dry_run)
    record = write_record(args.out, device, batch, args.dry_run, markdown(rows), rows=rows,
                          winners=winners(rows))
    print(f"winners: {json.dumps(record['winners'])}; table: {args.out / 'sweep.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
