"""The GPU suite's roofline part (gpu_suite/suite.py): a profiled
training step through the roofline report, then Nsight Compute on its top
kernels where ncu is there and allowed to read the counters."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys

from tools.gpu_suite import peer_io
from tools.gpu_suite.record import Suite, run_logged, tail
from tools.gpu_suite.training_parts import trainer_command


def part_roofline(suite: Suite, args: argparse.Namespace) -> None:
    """One profiled training step (three on a GPU) through the roofline report
    against the peaks roofline/peaks.py holds for the GPU found; then Nsight
    Compute on the report's top kernels where ncu works (else the reason)."""
    rec = suite.part("roofline")
    folder = suite.out / "roofline"
    steps = 1 if suite.dry_run else args.profile_steps
    cmd = trainer_command(args, folder, args.seed, 1, suite.dry_run) + ["--profile-steps", str(steps)]
    rc, seconds, log = run_logged(suite, cmd, "roofline.log", suite.left())
    rec.update(command=cmd[1:], exit_status=rc, wall_s=round(seconds, 1))
    report = folder / "profile" / "report.json"
    if rc != 0 or not report.exists():
        return suite.end("roofline", "failed", tail(log))
    rec.update(report_dir=str(report.parent), **peer_io.roofline_summary(report))
    timeline = report.parent / "timeline.json"  # the timed step's kernel time, GPU idle, launches
    if timeline.exists():
        rec["timeline"] = json.loads(timeline.read_text())
    suite.save()
    rec["ncu"] = run_ncu(suite, args, rec.get("top_kernels", []))
    suite.end("roofline")


NCU_METRICS = ("gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,"
               "sm__sass_thread_inst_executed_op_fadd_pred_on.sum,sm__sass_thread_inst_executed_op_fmul_pred_on.sum,"
               "sm__sass_thread_inst_executed_op_ffma_pred_on.sum,sm__sass_thread_inst_executed_op_hadd_pred_on.sum,"
               "sm__sass_thread_inst_executed_op_hmul_pred_on.sum,sm__sass_thread_inst_executed_op_hfma_pred_on.sum,"
               "sm__ops_path_tensor_src_bf16_dst_fp32.sum,sm__ops_path_tensor_src_fp16_dst_fp32.sum")


def kernel_pattern(name: str) -> str:
    """A regular expression for ncu's ``--kernel-name`` from a demangled name:
    its last name before the template or argument list, escaped."""
    base = re.split(r"[<(]", name.removeprefix("void ").strip(), maxsplit=1)[0]
    return re.escape(base.split("::")[-1] or base)


def run_ncu(suite: Suite, args: argparse.Namespace, kernels: list[str]) -> dict:
    """Nsight Compute over one more profiled step, on the top kernels only
    (each launch is replayed per metric pass: the whole step would take
    long), then the roofline report with its measured bytes and FLOPs."""
    ncu = shutil.which("ncu")
    if suite.dry_run or ncu is None or not kernels or args.ncu_kernels < 1:
        why = "dry run" if suite.dry_run else ("ncu not found on PATH" if ncu is None else
                                               "not asked for (--ncu-kernels 0)" if args.ncu_kernels < 1
                                               else "no GPU kernels")
        return {"status": "skipped", "reason": why}
    folder = suite.out / "roofline_ncu"
    csv = suite.out / "roofline" / "ncu.csv"
    names = "|".join(kernel_pattern(k) for k in kernels[:args.ncu_kernels])
    cmd = [ncu, "--csv", "--page", "raw", "--metrics", NCU_METRICS, "--kernel-name", f"regex:{names}",
           "--launch-count", str(4 * args.ncu_kernels),
           *trainer_command(args, folder, args.seed, 1, False), "--profile-steps", "1", "--no-compile"]
    rc, seconds, log = run_logged(suite, cmd, "ncu.log", suite.left() - 60)
    if rc != 0:
        return {"status": "failed" if rc is not None else "stopped at the budget", "reason": tail(log, 2)}
    csv.write_text(peer_io.csv_part(log.read_text(errors="replace")))
    rep = [sys.executable, "-m", "dawnbench_fast.roofline", "report",
           str(suite.out / "roofline" / "profile" / "trace.json"), "--ncu", str(csv),
           "--out", str(suite.out / "roofline" / "with_ncu")]
    rc2, _, log2 = run_logged(suite, rep, "ncu_report.log", max(suite.left(), 30))
    return {"status": "done" if rc2 == 0 else "failed", "seconds": round(seconds, 1), "csv": str(csv),
            "report_dir": str(suite.out / "roofline" / "with_ncu"),
            "reason": None if rc2 == 0 else tail(log2)}


