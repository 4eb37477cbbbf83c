"""``leaderboard RESULT [RESULT ...]``: a run (a run folder, its run.json, or
a ``--runs N`` folder), or several read together as the seeds of one recipe,
placed among DAWNBench's final CIFAR-10 winner and the later records,
by time to 94%. The records ship with the package (``cifar10_records.json``
beside this module), each with its hardware, cost and sources, exactly as
docs/FACTS.md states them; null where it gives no figure.

The run is always judged at DAWNBench's 94%, whatever target it was trained
for: its time is the clock at its first charged evaluation at or above 94%.
Several runs are placed by the mean time of those that reached 94%, with the
reached fraction and the mean accuracy beside it (a claim of 94% is a mean).
A run that never reached 94% is not placed: "not reached".

CPU rows (the records' CPU ports) carry their CPU family/model and date and
are not ranked by their seconds, which come from another machine or day: a
CPU run's place against the published recipe ported to its CPU is the ratio
compare.py measures side by side on one machine. ``--compare compare.json``
(compare.py's output) adds that port as a row at this run's time divided by
the ratio, with the CPU (read from the run.json files compare.py left beside
its JSON) and the date; a ratio measured on another CPU family/model than the
run's is refused.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from dawnbench_fast.analyze import study_cli
from dawnbench_fast.analyze.report_files import fmt_pct, write_outputs
from dawnbench_fast.analyze.run_records import RunRecord, read_runs
from dawnbench_fast.analyze.stats import describe, reached_fraction
from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.reporting.bench import table

COMMAND = "leaderboard"
RECORDS_FILE = "cifar10_records.json"
THIS_RUN = "this run"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(COMMAND, help="place a run among the DAWNBench CIFAR-10 entries and later records",
                       description=__doc__)
    p.add_argument("results", nargs="+", metavar="RESULT",
                   help="a run folder, its run.json, or a folder above runs (a --runs N folder); several "
                   "are read together as the seeds of one recipe")
    p.add_argument("--compare", metavar="COMPARE_JSON",
                   help="compare.py's compare.json measured beside this run on the same machine: places the "
                   "run against the published recipe's CPU port by that ratio")
    study_cli.add_common_args(p)  # --quick is accepted and changes nothing: nothing here trains
    p.set_defaults(command_fn=run)


def load_records() -> dict:
    """The shipped records file (package data)."""
    return json.loads(resources.files("dawnbench_fast.analyze").joinpath(RECORDS_FILE).read_text())


def rank_of(seconds: float, entries: list[dict]) -> int:
    """1-based place of ``seconds`` among ``entries`` with a time: one more
    than the number as fast or faster (a tie goes ahead: it was there first)."""
    return 1 + sum(e["time_seconds"] is not None and e["time_seconds"] <= seconds for e in entries)


def run_entry(records: list[RunRecord], target: float) -> dict:
    """The run(s) as one leaderboard row."""
    times = [r.time_to(target) for r in records]
    reached = describe([t for t in times if t is not None])
    costs = [r.train_cost_usd for r, t in zip(records, times, strict=True)
             if r.train_cost_usd is not None and t is not None]
    return {"entry": THIS_RUN if len(records) == 1 else f"this run ({len(records)} seeds, mean)",
            "time_seconds": reached["mean"], "time_std_seconds": reached["std"],
            "hardware": records[0].hardware, "cost_usd": describe(costs)["mean"],
            "mean_top1": describe([r.final_top1 for r in records])["mean"],
            "reached": reached_fraction(times), "runs": len(records),
            "paths": [str(r.path) for r in records]}


def cpu_text(cpu: dict | None) -> str:
    """``family 25 model 17`` (or what is known of it)."""
    if not cpu:
        return "CPU not recorded"
    if cpu.get("family") is None:
        return f"{cpu.get('name') or 'a CPU'}, family/model not recorded"
    return f"family {cpu['family']} model {cpu['model']}"


def read_compare(path: str) -> dict:
    """compare.py's JSON (ratio of end-of-training clocks, ours over the
    port, and each side's figures) with the CPU and date of its runs, read
    from the run folders compare.py left beside it."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
        ratio, summary = float(data["ratio"]), data["summary"]
        peer, ours = summary["peer"], summary["ours"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"--compare {path}: not compare.py's JSON ({type(e).__name__}: {e})") from None
    cpus, dates = [], []
    for run_json in sorted(p.parent.rglob("run.json")):
        try:
            cpus.append(json.loads(run_json.read_text()).get("cpu_info"))
        except (OSError, ValueError):
            continue
        dates += [d for d in map(timestamp_of, sorted(run_json.parent.glob("*.json"))) if d]
    cpu = next((c for c in cpus if c), None)
    # the DAWNBench training JSON beside a run states its day; else the file's (a copy's is its copying day)
    date = min(dates) if dates else \
        datetime.fromtimestamp(p.stat().st_mtime, UTC).date().isoformat() + " (compare.json's file date)"
    return {"ratio": ratio, "peer": peer, "ours": ours, "pairs": len(data.get("rows", [])) // 2,
            "cpu": None if cpu is None else {"name": cpu.get("model_name"), "family": cpu.get("family"),
                                             "model": cpu.get("model")},
            "date": date, "path": str(p)}


def timestamp_of(path: Path) -> str | None:
    """The ``timestamp`` (a day) of a DAWNBench JSON, else None."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data.get("timestamp") if isinstance(data, dict) else None


def side_by_side_entry(mine: dict, compare: dict, run_cpu: dict | None) -> tuple[dict | None, str]:
    """The CPU port's row at this run's time / the ratio, or None and why not."""
    c = compare["cpu"]
    if mine["time_seconds"] is None:
        return None, "this run did not reach 94%: no time to scale"
    if c and run_cpu and (c["family"], c["model"]) != (run_cpu.get("family"), run_cpu.get("model")):
        return None, (f"the ratio was measured on {cpu_text(c)}, this run ran on {cpu_text(run_cpu)}: "
                      "a ratio carries over only on the machine class it was measured on")
    seconds = mine["time_seconds"] / compare["ratio"]
    text = (f"{seconds:.1f} s (this run / {compare['ratio']:.3f}, the ratio of end clocks measured side by "
            f"side: ours {compare['ours']['end_clock_mean']:.1f} s, port "
            f"{compare['peer']['end_clock_mean']:.1f} s, {compare['pairs']} pair(s))")
    return {"entry": "airbench94_muon ported to this CPU, side by side (compare.py)", "time_seconds": seconds,
            "time_text": text, "hardware": f"this run's machine ({cpu_text(c)}, {compare['date']})",
            "cpu": c, "date": compare["date"], "cost_usd": None,
            "mean_top1": compare["peer"]["acc_mean"] / 100, "kind": "side by side",
            "sources": [compare["path"]]}, ""


def place(mine: dict, records: dict, compare: dict | None = None, run_cpu: dict | None = None) -> dict:
    """leaderboard.json: the run's row, its rank (None: not reached) and the
    whole table with the run in its place. CPU rows are listed, not ranked;
    with ``compare`` (read_compare) the port measured beside the run is."""
    entries = [e for e in records["entries"] if "cpu" not in e]
    cpu_rows = [e for e in records["entries"] if "cpu" in e]
    note = ""
    if compare is not None:
        beside, note = side_by_side_entry(mine, compare, run_cpu)
        entries += [beside] if beside else []
    ranked = sorted((e for e in entries if e["time_seconds"] is not None), key=lambda e: e["time_seconds"])
    unranked = [e for e in entries if e["time_seconds"] is None] + cpu_rows
    rank = None if mine["time_seconds"] is None else rank_of(mine["time_seconds"], ranked)
    rows = list(ranked)
    if rank is not None:
        rows.insert(rank - 1, mine)
    return {"command": COMMAND, "target": records["target"], "run": mine, "rank": rank,
            "of": len(ranked) + (rank is not None), "table": rows + unranked, "unranked": len(unranked),
            "compare_note": note, "records_about": records["about"]}


def run(args: argparse.Namespace) -> int:
    records = read_runs(args.results, COMMAND)
    compare = read_compare(args.compare) if args.compare else None
    out = study_cli.resolve_out(args, COMMAND)
    shipped = load_records()
    data = place(run_entry(records, shipped["target"]), shipped, compare, records[0].cpu)
    write_outputs(out, COMMAND, data, render(data), lambda plt: figure(plt, data))
    return 0


def _time(e: dict) -> str:
    if e["entry"].startswith(THIS_RUN):
        std = "" if e.get("time_std_seconds") is None else f" +- {e['time_std_seconds']:.1f}"
        return "not reached" if e["time_seconds"] is None else f"{e['time_seconds']:.1f}{std} s"
    return e["time_text"]


def _hardware(e: dict) -> str:
    """The hardware, and for a CPU row its family/model and date."""
    if "cpu" not in e or e.get("kind") == "side by side":
        return e["hardware"]
    return f"{e['hardware']} ({cpu_text(e['cpu'])}; {e.get('date') or 'date not recorded'})"


def render(data: dict) -> str:
    mine = data["run"]
    ranked = len(data["table"]) - data.get("unranked", 0)
    rows = [[str(i + 1) if i < ranked and e["time_seconds"] is not None else "-", e["entry"], _time(e),
             _hardware(e), "-" if e["cost_usd"] is None else f"${e['cost_usd']:.4f}", fmt_pct(e["mean_top1"])]
            for i, e in enumerate(data["table"])]
    reached = mine["reached"]
    where = (f"place {data['rank']} of {data['of']}" if data["rank"] is not None else
             f"not placed: not reached {100 * data['target']:.0f}% in any run")
    lines = [f"leaderboard: CIFAR-10 to {100 * data['target']:.0f}% top-1; this run: {where}",
             f"this run: {_time(mine)} on {mine['hardware']}, {reached['reached']}/{reached['runs']} run(s) "
             f"reached {100 * data['target']:.0f}%, mean final top-1 {fmt_pct(mine['mean_top1'])}",
             table(["rank", "entry", "time to 94%", "hardware", "cost", "mean top-1"], rows), "sources:"]
    lines += [f"  {e['entry']}: {' '.join(e['sources'])}" for e in data["table"] if e.get("sources")]
    if any("cpu" in e and e.get("kind") != "side by side" for e in data["table"]):
        how = ("a run is placed against the CPU port by compare.py's ratio (--compare)"
               if not data.get("compare_note") else f"--compare not applied: {data['compare_note']}")
        lines.append(f"CPU rows (rank -) are not ranked by their seconds, from another machine or day; {how}")
    if mine["mean_top1"] is not None and mine["mean_top1"] < data["target"] and data["rank"] is not None:
        lines.append(f"note: the mean final accuracy is below {100 * data['target']:.0f}%: the records are "
                     "means over many runs, so this place flatters the run")
    lines.append("cost: none of the records states one (docs/FACTS.md)" + (
        "; this run's needs --cost-per-hour when it is trained" if mine["cost_usd"] is None else ""))
    return "\n".join(lines)


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def figure(plt: Any, data: dict) -> Any:
    """The ranked entries' times on a log axis, the run in red (or, not placed,
    a note)."""
    ranked = len(data["table"]) - data.get("unranked", 0)
    rows = [e for e in data["table"][:ranked] if e["time_seconds"] is not None]
    fig, ax = plt.subplots(figsize=(11, 0.4 * len(rows) + 1.6), dpi=110)
    ys = list(range(len(rows)))[::-1]
    for y, e in zip(ys, rows, strict=True):
        mine = e["entry"].startswith(THIS_RUN)
        ax.barh(y, e["time_seconds"], color="#c44e52" if mine else "#4c72b0")
        ax.annotate(f" {e['time_seconds']:.4g} s, {_short(e['hardware'], 32)}", (e["time_seconds"], y),
                    va="center", fontsize=7)
    ax.set_yticks(ys, [_short(e["entry"], 44) for e in rows], fontsize=8)
    ax.set(xscale="log", xlabel=f"time to {100 * data['target']:.0f}% top-1, s (log scale)",
           title="CIFAR-10 to 94%: records (docs/FACTS.md) and this run" +
           ("" if data["rank"] is not None else " (not placed: 94% not reached)"))
    ax.set_xlim(right=max(e["time_seconds"] for e in rows) * 300)  # room for the labels
    fig.tight_layout()
    return fig
