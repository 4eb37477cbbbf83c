"""``python -m dawnbench_fast.roofline``: report on a trace, show peaks.

    python -m dawnbench_fast.roofline report TRACE [--device NAME | --peaks FILE] [--out DIR]
                                                   [--ncu CSV] [--steps N]
    python -m dawnbench_fast.roofline ncu CSV [--device NAME | --peaks FILE] [--out DIR]
    python -m dawnbench_fast.roofline peaks [--refresh] [--table]
"""

from __future__ import annotations

import argparse
import sys

from dawnbench_fast.config.overrides import OneLineParser, finite_float
from dawnbench_fast.roofline.peak_choice import resolve_peaks
from dawnbench_fast.roofline.peaks import GPU_TABLE, Peaks
from dawnbench_fast.roofline.text_report import si


def _parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="python -m dawnbench_fast.roofline",
                                 description="Roofline reports from PyTorch profiler traces and "
                                             "Nsight Compute CSVs; device peaks.")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=OneLineParser)
    rp = sub.add_parser("report", help="count a profiler Chrome trace and report against peaks")
    rp.add_argument("trace", help="Chrome trace JSON (.json or .json.gz) recorded with "
                                  "record_shapes=True")
    _peak_args(rp)
    rp.add_argument("--ncu", help="Nsight Compute CSV of the same run: measured bytes/FLOPs")
    rp.add_argument("--steps", type=int, help="training steps in the trace (per-step totals)")
    rp.add_argument("--out", help="folder for report.txt/.json/.html and roofline.png/.svg")
    rp.add_argument("--rows", type=int, default=40, help="rows to print (default 40)")
    np_ = sub.add_parser("ncu", help="per-kernel report from an Nsight Compute CSV alone")
    np_.add_argument("csv")
    _peak_args(np_)
    np_.add_argument("--out")
    np_.add_argument("--rows", type=int, default=40)
    pp = sub.add_parser("peaks", help="measure (once, then cached) and show this machine's peaks")
    pp.add_argument("--refresh", action="store_true",
                    help="measure again; per microbenchmark the best of old and new is kept")
    pp.add_argument("--reset", action="store_true", help="forget the cached rates, then measure")
    pp.add_argument("--table", action="store_true", help="also print the GPU peak table")
    pp.add_argument("--threads", type=int, help="torch threads to measure with")
    pp.add_argument("--seconds", type=finite_float, default=0.4,
                    help="time budget per microbenchmark when measuring (default 0.4)")
    return ap


def _peak_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--device", help=f"peaks to use: 'cpu' or one of {', '.join(GPU_TABLE)} "
                                    "(default: the trace's GPU, else this machine)")
    g.add_argument("--peaks", help="JSON file with peaks (see docs/ROOFLINE.md)")


def _show_peaks(p: Peaks) -> str:
    lines = [f"{p.name} ({p.kind})"]
    for prec, v in sorted(p.flops.items()):
        lines.append(f"  {prec:<5} {si(v, 'FLOP/s'):>14}   {p.source.get(prec, '')}")
    lines.append(f"  {'DRAM':<5} {si(p.bandwidth, 'B/s'):>14}   {p.source.get('bandwidth', '')}")
    if p.notes:
        lines.append(f"  ({p.notes})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "peaks":
            import torch

            from dawnbench_fast.roofline.cpu_peaks import cpu_peaks

            if args.threads:
                torch.set_num_threads(args.threads)
            print(_show_peaks(cpu_peaks(refresh=args.refresh, budget_s=args.seconds,
                                        reset=args.reset)))
            from dawnbench_fast.roofline.peaks import detect_gpu

            gpu = detect_gpu()
            print(_show_peaks(gpu) if gpu else "GPU: none detected (torch.cuda / NVML)")
            if args.table:
                print("\nGPU table (dense):")
                for p in GPU_TABLE.values():
                    print(_show_peaks(p))
            return 0
        if args.cmd == "ncu":
            from dawnbench_fast.roofline.ncu import parse_ncu_csv
            from dawnbench_fast.roofline.ncu_report import ncu_report

            kernels = parse_ncu_csv(args.csv)
            peaks = resolve_peaks(args.device, args.peaks, on_gpu=True)
            rep = ncu_report(kernels, peaks, args.csv)
        else:
            from dawnbench_fast.roofline.ncu import parse_ncu_csv
            from dawnbench_fast.roofline.report import build_report

            ncu = parse_ncu_csv(args.ncu) if args.ncu else None
            rep = build_report(args.trace, device=args.device, peaks_file=args.peaks, ncu=ncu,
                               steps=args.steps)
        from dawnbench_fast.roofline.text_report import render_text

        print(render_text(rep, max_rows=args.rows), end="")
        if args.out:
            from dawnbench_fast.roofline.outputs import write_report_set

            paths = write_report_set(rep, args.out)
            print("wrote " + ", ".join(str(p) for p in paths.values()))
        return 0
    except ValueError as e:  # bad input: one line naming the flag/file and the fix
        print(f"error: {e}", file=sys.stderr)
        return 2
