"""Tune the conv group's two Triton GEMM kernels in one command: each tile
configuration at every conv call the recipe's step makes, beside cuDNN's time
for the same call, as a table (a GPU machine reached by a command runner is
not under your hands between commands, so the whole sweep is one run).

    python -m tools.gpu_suite.sweep_conv_group --out DIR [--batch N] [--budget S] [--dry-run]

The calls, per conv group of the default recipe (bf16, NHWC, its activation):
the pooled first conv with statistics, the second conv with statistics (and
the BN+act prologue where ``FUSED_PROLOGUE`` asks for it), the two data
gradients (the forward kernel on flipped filters), and the two weight
gradients (kernels/conv_group_wgrad.py). Configurations patch
``conv_blocks`` / ``wgrad_blocks`` of kernels/conv_group.py (the defaults
every run takes); each is timed by its
kernels' own time (the profiler's sum, as sweep_bn_act.py), with the
registers and spills Triton reports for it. cuDNN's row times
``F.conv2d`` (forward, data gradient) and ``aten.convolution_backward``
(weight gradient) on the same tensors.

DIR/sweep.json holds every row, the winner of each call and the winner of
each (Cin, Cout) launch; DIR/sweep.md the table. ``--budget`` seconds
(default 300) stops the sweep between configurations and still writes what
it measured (compiles dominate: several seconds a configuration).
``--dry-run`` runs every configuration once at a tiny batch in Triton's
interpreter, timing nothing.

    python -m tools.gpu_suite.sweep_conv_group --apply DIR/sweep.json -- SUITE_ARGS

runs the GPU suite (gpu_suite/suite.py) with SUITE_ARGS in this process, each launch's
(Cin, Cout) taking its winner from DIR/sweep.json: the ops part's conv group
timed with the winners in the same command as the sweep, before they are
written into conv_blocks/wgrad_blocks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

if "--dry-run" in sys.argv[1:]:  # before anything imports triton, which reads it once
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from dawnbench_fast.cifar.recipe import CifarRecipe  # noqa: E402
from tools.gpu_suite.sweeps import patched, refusal, write_record  # noqa: E402

# (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages), the first the reference of the error
# column (the first run's winners, docs/results/gpu-h100-2026-11-26b; the defaults,
# kernels/conv_group.py conv_blocks / wgrad_blocks, now differ per channels); BLOCK_N
# and the forward's BLOCK_K are capped at the call's channels by the launch (a tile
# wider than them is waste).
# The forward's 64x128x64 with 8 warps: fewer registers a thread than the default.
CONV_CONFIGS = [(128, 128, 64, 8, 3), (64, 128, 64, 4, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 3),
                (64, 128, 64, 4, 4), (128, 64, 64, 4, 3), (64, 64, 64, 4, 4), (128, 128, 32, 4, 4),
                (128, 128, 128, 8, 3), (64, 128, 64, 8, 3)]
WGRAD_CONFIGS = [(64, 128, 64, 8, 3), (64, 64, 32, 4, 4), (64, 128, 64, 8, 4), (128, 128, 64, 8, 3),
                 (64, 128, 128, 8, 3), (32, 128, 64, 4, 3), (64, 64, 64, 4, 3), (128, 128, 32, 8, 3)]


Call = tuple[str, str, tuple[int, int], Callable, Callable]


def calls(batch: int, device: torch.device) -> list[Call]:
    """(kind, name, (Cin, Cout) of the kernel's launch, our launch, cuDNN's) of
    every GEMM call of the recipe's conv groups."""
    w = CifarRecipe().widths
    groups = [(24, w[0], 31), (w[0], w[1], 15), (w[1], w[2], 7)]  # 24: the whitening conv's outputs
    return [c for cin, cout, side in groups for c in _group_calls(batch, cin, cout, side, device)]


def _group_calls(batch: int, cin: int, cout: int, side: int, device: torch.device) -> list[Call]:
    from dawnbench_fast.kernels import conv_group as tk

    act, dt, half = CifarRecipe().act, torch.bfloat16, side // 2
    e = torch.empty(0, device=device)
    x = torch.randn(batch, side, side, cin, device=device).to(dt)
    y1 = torch.randn(batch, half, half, cout, device=device).to(dt)
    dz = torch.randn(batch, half, half, cout, device=device).to(dt)
    dz1 = torch.randn(batch, side, side, cout, device=device).to(dt)
    w1 = (torch.randn(cout, cin, 3, 3, device=device) * 0.1).to(dt)
    w2 = (torch.randn(cout, cout, 3, 3, device=device) * 0.1).to(dt)
    sc, sh = torch.rand(cout, device=device) + 0.5, torch.randn(cout, device=device)
    # the second conv's input as the group makes it: BN+act in the conv's prologue, or stored
    bn, pro = ((sc, sh), "+prologue") if tk.FUSED_PROLOGUE else ((e, e), "")
    m1, m2 = tk.wmat(w1, dt), tk.wmat(w2, dt)
    d1, d2 = tk._wmat_dgrad(w1, dt), tk._wmat_dgrad(w2, dt)

    def cl(t: torch.Tensor) -> torch.Tensor:  # NHWC data as the channels_last NCHW view cuDNN takes
        return t.permute(0, 3, 1, 2)

    def flipped(w: torch.Tensor) -> torch.Tensor:
        return w.flip(2, 3).transpose(0, 1)

    return [
        ("fwd", f"conv1+pool+stats {cin}->{cout} @{side}", (cin, cout),
         lambda: tk._conv3x3_pool_fwd(x, m1, e, e, act, True, False),
         lambda: F.max_pool2d(F.conv2d(cl(x), w1, padding=1), 2)),
        ("fwd", f"conv2{pro}+stats {cout}->{cout} @{half}", (cout, cout),
         lambda: tk._conv3x3_fwd(y1, m2, *bn, act, True, False),
         lambda: F.conv2d(cl(y1), w2, padding=1)),
        ("fwd", f"dgrad conv2 {cout}->{cout} @{half}", (cout, cout),
         lambda: tk._conv3x3_fwd(dz, d2, e, e, "identity", False, False),
         lambda: F.conv2d(cl(dz), flipped(w2), padding=1)),
        ("fwd", f"dgrad conv1 {cout}->{cin} @{side}", (cout, cin),
         lambda: tk._conv3x3_fwd(dz1, d1, e, e, "identity", False, False),
         lambda: F.conv2d(cl(dz1), flipped(w1), padding=1)),
        ("wgrad", f"wgrad conv1 {cin}->{cout} @{side}", (cin, cout),
         lambda: tk._conv3x3_wgrad(x, dz1, e, e, act, False),
         lambda: _cudnn_wgrad(cl(dz1), cl(x), w1)),
        ("wgrad", f"wgrad conv2{pro} {cout}->{cout} @{half}", (cout, cout),
         lambda: tk._conv3x3_wgrad(y1, dz, *bn, act, False),
         lambda: _cudnn_wgrad(cl(dz), cl(y1), w2)),
    ]


def _cudnn_wgrad(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                               [False, True, False])[1]


def _tiles(kind: str, cfg: tuple[int, int, int, int, int], cin: int, cout: int) -> tuple[int, ...]:
    """``cfg`` at a launch of (cin, cout): BLOCK_N no wider than Cout's power
    of two, the forward's BLOCK_K no deeper than Cin's (the defaults' caps)."""
    from dawnbench_fast.kernels.conv_group import channel_tile

    bm, bn, bk, warps, stages = cfg
    return bm, channel_tile(cout, bn), channel_tile(cin, bk) if kind == "fwd" else bk, warps, stages


def configured(kind: str, cfg: tuple[int, int, int, int, int]):
    """The context in which kernels/conv_group.py launches ``kind`` with ``cfg``."""
    from dawnbench_fast.kernels import conv_group as tk

    name = "conv_blocks" if kind == "fwd" else "wgrad_blocks"
    return patched(tk, **{name: lambda cin, cout: _tiles(kind, cfg, cin, cout)})


def channel_winners(record: dict) -> dict[str, dict[tuple[int, int], tuple[int, ...]]]:
    """Per kernel and (Cin, Cout) of its launch: the configuration with the
    least summed time over that pair's calls, among those that timed them all
    without spills or disagreement (the table conv_blocks/wgrad_blocks take)."""
    pairs = {name: tuple(p) for name, p in record["calls"].items()}
    out: dict[str, dict[tuple[int, int], tuple[int, ...]]] = {"fwd": {}, "wgrad": {}}
    for kind in out:
        best: dict[tuple[int, int], float] = {}
        for r in record["rows"]:
            if (r["kind"] != kind or r["config"] == "cuDNN" or r.get("spills")
                    or r.get("rel_err_vs_first", 0) > 1e-2 or "error" in r):
                continue
            sums: dict[tuple[int, int], float] = {}
            for name, ms in r["ms"].items():
                if ms is not None:
                    sums[pairs[name]] = sums.get(pairs[name], 0.0) + ms
            for pair, t in sums.items():
                if pair not in best or t < best[pair]:
                    best[pair] = t
                    out[kind][pair] = tuple(int(v) for v in r["config"].split("x"))
    return out


def applied(table: dict[str, dict[tuple[int, int], tuple[int, ...]]]):
    """The context in which kernels/conv_group.py launches each (Cin, Cout) with
    its winner from :func:`channel_winners` (others keep the defaults)."""
    from contextlib import ExitStack

    from dawnbench_fast.kernels import conv_group as tk

    stack = ExitStack()
    for kind, name in (("fwd", "conv_blocks"), ("wgrad", "wgrad_blocks")):
        default = getattr(tk, name)
        chosen = table.get(kind, {})

        def blocks(cin, cout, kind=kind, default=default, chosen=chosen):
            cfg = chosen.get((cin, cout))
            return _tiles(kind, cfg, cin, cout) if cfg else default(cin, cout)

        stack.enter_context(patched(tk, **{name: blocks}))
    return stack


def _output(out: object) -> torch.Tensor:
    """The tensor a call is judged by: the conv's output (the first of the
    forward kernel's four), the weight gradient as it is."""
    return out[0] if isinstance(out, tuple) else out


def _kernel_ms(fn: Callable[[], object], dry_run: bool) -> float | None:
    if dry_run:
        return None
    from tools.gpu_suite.ops import kernel_time

    return float(kernel_time(fn, calls=10)["kernel_ms"])


def _compiled(kind: str) -> dict:
    """Triton's cache of the kernel's compilations on this device (key -> kernel),
    empty where there is none to read (the interpreter)."""
    from dawnbench_fast.kernels.conv_group_conv3x3 import conv3x3_fwd_kernel
    from dawnbench_fast.kernels.conv_group_wgrad import conv3x3_wgrad_kernel

    kern = conv3x3_fwd_kernel if kind == "fwd" else conv3x3_wgrad_kernel
    try:
        return dict(kern.device_caches[torch.cuda.current_device()][0])
    except Exception:  # noqa: BLE001 - the interpreter and other tritons keep no such cache
        return {}


def _resources(before: dict, after: dict) -> dict:
    """Registers and spills of the variants compiled between two snapshots (one
    configuration's), the worst of them."""
    new = [k for key, k in after.items() if key not in before]
    try:
        return {"regs": max(k.n_regs for k in new), "spills": max(k.n_spills for k in new)} if new else {}
    except AttributeError:
        return {}


def sweep(work: list[Call], dry_run: bool, budget_s: float, first: int | None = None) -> list[dict]:
    """cuDNN's row and a row per configuration (the first ``first`` of each
    kernel's list, default all), each call's output compared with the first
    configuration's (a tile edge a configuration gets wrong shows there)."""
    t_end = time.monotonic() + budget_s
    rows: list[dict] = []
    for kind in ("fwd", "wgrad"):
        row = {"kind": kind, "config": "cuDNN", "ms": {}}
        for k, name, _, _, ref in work:
            if k == kind:
                ref()
                row["ms"][name] = _kernel_ms(ref, dry_run)
        rows.append(row)
        print(json.dumps(row), flush=True)
    baseline: dict[str, torch.Tensor] = {}
    for kind, configs in (("fwd", CONV_CONFIGS), ("wgrad", WGRAD_CONFIGS)):
        for cfg in configs[:first]:
            row = {"kind": kind, "config": "x".join(map(str, cfg)), "ms": {}, "rel_err_vs_first": 0.0}
            if time.monotonic() > t_end:
                rows.append({**row, "error": "not run: --budget spent"})
                continue
            before = _compiled(kind)
            try:
                with configured(kind, cfg):
                    for k, name, _, ours, _ in work:
                        if k != kind:
                            continue
                        out = _output(ours()).float()
                        ref = baseline.setdefault(name, out)
                        err = float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-12))
                        row["rel_err_vs_first"] = max(row["rel_err_vs_first"], err)
                        row["ms"][name] = _kernel_ms(ours, dry_run)
            except Exception as e:  # noqa: BLE001 - a configuration that fails is a row, not the end
                row["error"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"
            row.update(_resources(before, _compiled(kind)))
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def winners(rows: list[dict]) -> dict[str, dict]:
    """Per call: the fastest of our configurations, its time and cuDNN's."""
    out: dict[str, dict] = {}
    cudnn = {n: ms for r in rows if r["config"] == "cuDNN" for n, ms in r["ms"].items()}
    for r in rows:
        if r["config"] == "cuDNN" or r.get("spills") or r.get("rel_err_vs_first", 0) > 1e-2:
            continue  # a configuration that spills or computes something else is no winner
        for name, ms in r["ms"].items():
            if ms is not None and (name not in out or ms < out[name]["ms"]):
                out[name] = {"config": r["config"], "ms": ms, "cudnn_ms": cudnn.get(name)}
    return out


def markdown(rows: list[dict]) -> str:
    lines = []
    for kind in ("fwd", "wgrad"):
        mine = [r for r in rows if r["kind"] == kind]
        names = list(next((r["ms"] for r in mine if r["ms"]), {}))
        head = ("| config (BMxBNxBKxwarpsxstages) | " + " | ".join(names)
                + " | total ms | regs | spills | rel. error vs the first |")
        lines += [head, "|" + "---|" * (head.count("|") - 1)]
        for r in mine:
            cells = [f"{r['ms'][n]:.4f}" if r["ms"].get(n) is not None else "" for n in names]
            timed = [v for v in r["ms"].values() if v is not None]
            total = f"{sum(timed):.4f}" if len(timed) == len(names) and names else r.get("error", "")
            lines.append(f"| {r['config']} | " + " | ".join(cells)
                         + f" | {total} | {r.get('regs', '')} | {r.get('spills', '')} "
                         + f"| {r.get('rel_err_vs_first', '')} |")
        lines.append("")
    return "\n".join(lines)


def _apply_and_run_suite(path: Path, suite_args: list[str]) -> int:
    try:
        table = channel_winners(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError) as e:
        print(f"gpu_sweep_conv_group: --apply {path}: not a sweep.json this script wrote ({e}); "
              "run the sweep first", file=sys.stderr)
        return 2
    print(f"winners applied: {json.dumps({k: {str(p): c for p, c in v.items()} for k, v in table.items()})}",
          flush=True)
    from tools.gpu_suite import suite

    with applied(table):
        return suite.main(suite_args)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="folder of sweep.json and sweep.md (required unless --apply)")
    ap.add_argument("--apply", type=Path, metavar="SWEEP_JSON",
                    help="run the GPU suite with the arguments after -- and this sweep's winners")
    ap.add_argument("suite_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help="images a step (default: the recipe's; 2 in a dry run)")
    ap.add_argument("--budget", type=float, default=300.0,
                    help="seconds before the sweep stops (default 300)")
    ap.add_argument("--first", type=int, help="only the first N configurations of each kernel")
    ap.add_argument("--dry-run", action="store_true", help="every configuration once on the CPU, untimed")
    args = ap.parse_args(argv)
    if args.apply is not None:
        return _apply_and_run_suite(args.apply, [a for a in args.suite_args if a != "--"])
    if args.out is None:
        ap.error("--out is required (or --apply SWEEP_JSON -- SUITE_ARGS)")
    why = refusal("gpu_sweep_conv_group", args.dry_run)
    if not 0 < args.budget < math.inf:  # nan and inf too: a budget that never runs out
        why = f"gpu_sweep_conv_group: --budget {args.budget}: must be a positive number of seconds"
    if why:
        print(why, file=sys.stderr)
        return 2
    device = torch.device("cpu" if args.dry_run else "cuda")
    batch = args.batch or (2 if args.dry_run else CifarRecipe().batch_size)
    work = calls(batch, device)
    rows = sweep(work, args.dry_run, args.budget, args.first)
    names = {name: list(pair) for _, name, pair, _, _ in work}
    by_pair = {kind: {f"{a}->{b}": "x".join(map(str, cfg)) for (a, b), cfg in table.items()}
               for kind, table in channel_winners({"calls": names, "rows": rows}).items()}
    record = write_record(args.out, device, batch, args.dry_run, markdown(rows), calls=names, rows=rows,
                          winners=winners(rows), winners_by_channels=by_pair)
    print(f"winners: {json.dumps(record['winners'])}; table: {args.out / 'sweep.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
