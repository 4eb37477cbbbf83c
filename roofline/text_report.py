"""Plain-text rendering of a :class:`~dawnbench_fast.roofline.report.Report`."""

from __future__ import annotations

from dawnbench_fast.roofline.report import CONVENTIONS, Report, time_basis_label, timing_tool


def si(v: float | None, unit: str = "") -> str:
    """1.23e9 -> '1.23 G' (+unit)."""
    if v is None:
        return "-"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}".rstrip()


def _ms(us: float) -> str:
    return f"{us / 1000:.3f}"


def render_text(rep: Report, max_rows: int | None = 60) -> str:
    t = rep.totals
    p = rep.peaks
    lines = [
        f"Roofline report: {rep.source}",
        f"Device: {p.name} ({p.kind}); roofs: "
        + ", ".join(f"{k} {si(v, 'FLOP/s')}" for k, v in sorted(p.flops.items()))
        + f", bandwidth {si(p.bandwidth, 'B/s')}",
        "  sources: " + "; ".join(f"{k}: {v}" for k, v in p.source.items()),
        *([f"  {p.notes}"] if p.notes else []),  # e.g. the clock the GPU table was scaled to
        f"Time basis: {time_basis_label(rep)}"
        + (f", {rep.steps} steps" if rep.steps else ""),
        f"Conventions: {CONVENTIONS}",
    ]
    for w in rep.warnings:
        lines.append(f"WARNING: {w}")
    lines += [
        "",
        f"Totals: op time {_ms(t['op_time_us'])} ms, counted {t['coverage']:.2%} "
        f"(uncounted {_ms(t['uncounted_time_us'])} ms; framework overhead outside ops "
        f"{_ms(t['overhead_time_us'])} ms, not in op time)",
        f"  FLOPs {si(t['flops'])} (matmul/conv {si(t['matmul_conv_flops'])}, "
        f"other {si(t['other_flops'])}); minimal bytes {si(t['bytes'], 'B')}",
        f"  achieved {si(t['flops_per_s'], 'FLOP/s')} = {t['fraction_of_peak']:.1%} of the "
        f"{t['main_precision']} peak {si(t['main_peak_flops_per_s'], 'FLOP/s')}; matmul/conv "
        f"alone {si(t['matmul_conv_flops_per_s'], 'FLOP/s')} = "
        f"{t['matmul_conv_fraction_of_peak']:.1%}",
    ]
    if "wall_time_us" in t:
        lines.append(f"  wall clock of the profiled region {_ms(t['wall_time_us'])} ms "
                     f"({timing_tool(rep)} on, time between ops included): "
                     f"{si(t['wall_flops_per_s'], 'FLOP/s')} = "
                     f"{t['wall_fraction_of_peak']:.1%} of the {t['main_precision']} peak")
    if rep.steps:
        lines.append(f"  per step: {si(t['flops_per_step'])}FLOP "
                     f"(matmul/conv {si(t['matmul_conv_flops_per_step'])}FLOP), "
                     f"{_ms(t['op_time_per_step_us'])} ms of op time")
    header = (f"{'op':<34} {'shapes':<34} {'dtype':<12} {'calls':>5} {'ms':>9} {'share':>6} "
              f"{'FLOP':>9} {'bytes':>9} {'FLOP/B':>7} {'FLOP/s':>9} {'B/s':>9} {'%roof':>6} "
              f"{'roof':>5} bound")
    lines += ["", header, "-" * len(header)]
    shown = rep.rows if max_rows is None else rep.rows[:max_rows]
    for r in shown:
        measured = "*" if r.measured_bytes is not None else ""
        flops = (si(r.measured_flops) + "*") if r.measured_flops is not None else si(r.flops)
        lines.append(
            f"{r.op[:34]:<34} {r.shapes[:34]:<34} {r.dtypes[:12]:<12} {r.calls:>5} "
            f"{_ms(r.time_us):>9} {r.share:>6.1%} {flops:>9} "
            f"{si(r.measured_bytes if r.measured_bytes is not None else r.bytes) + measured:>9} "
            f"{(f'{r.intensity:.3g}' if r.intensity is not None else '-'):>7} "
            f"{si(r.flops_per_s):>9} {si(r.bytes_per_s):>9} {r.pct_of_roof:>6.1%} "
            f"{(r.roof_precision if r.flops > 0 else 'bw'):>5} {r.bound}"
        )
    if max_rows is not None and len(rep.rows) > max_rows:
        rest = rep.rows[max_rows:]
        lines.append(f"... {len(rest)} more rows, {_ms(sum(r.time_us for r in rest))} ms "
                     "(all rows are in report.json)")
    lines += ["", "Uncounted ops (no cost formula), by time:"]
    if not rep.uncounted:
        lines.append("  (none)")
    for d in rep.uncounted:
        lines.append(f"  {d['name']:<60} {d['calls']:>5} calls {_ms(d['time_us']):>9} ms "
                     f"{d['share']:>6.2%}")
    lines += ["", "Framework overhead outside ops (self time of containers), top 10:"]
    for d in rep.overhead[:10]:
        lines.append(f"  {d['name'][:70]:<70} {_ms(d['time_us']):>9} ms")
    if rep.kernels:
        lines += ["", "GPU kernels, by time (top 30):"]
        for d in rep.kernels[:30]:
            lines.append(f"  {d['kernel'][:70]:<70} {d['calls']:>5} {_ms(d['time_us']):>9} ms  "
                         f"<- {d['op'] or 'UNLINKED'}")
    lines.append("")
    lines.append("* measured by Nsight Compute (else counted: FLOPs from shapes, minimal bytes)")
    return "\n".join(lines) + "\n"
