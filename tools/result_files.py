"""The committed run files the ``results`` command reads
(tools/results.py): compare.py's compare.json joined with
ours' run.json of each seed, the GPU suite's suite.json with its peer part,
and docs/results/provenance.json (what the files do not record). Each pair
of ours' run and the published recipe's becomes a :class:`Pair` with ours'
provenance: machine class, commit, dirty."""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dawnbench_fast.analyze.leaderboard import timestamp_of
from dawnbench_fast.analyze.run_records import RunRecord, read_run
from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.hardware.machine import cpu_class

COMMAND = "results"
NOTES_FILE = "provenance.json"
COMPARE_FILE = "compare.json"
SUITE_FILE = "suite.json"
# Trainer flags that leave the recipe as it is (which seed, where the files
# go, how many runs, the data's folder, the latency loop's length); any other
# flag makes its runs a row of their own, labelled with it.
NEUTRAL_FLAGS = {"--seed": 1, "--runs": 1, "--out": 1, "--overwrite": 0, "--no-progress": 0,
                 "--data-dir": 1, "--latency-images": 1}
END_CLOCK_TOLERANCE_S = 0.5  # compare.json's end clock against run.json's (hours x 3600 rounding)


@dataclass(frozen=True)
class Machine:
    """A machine class: a CPU's vendor, family and model (and the threads
    the runs used), or a GPU's name; ``label`` is what the table shows."""

    key: tuple
    label: str


@dataclass
class Pair:
    """One of ours' runs and the published recipe's run of the same seed (a
    GPU block's k-th run of each side), with ours' provenance."""

    source: Path  # the compare.json or suite.json
    seed: int
    ours_end: float  # end-of-training clock, s
    peer_end: float
    ours_top1: float  # a fraction
    ours_tta: float | None  # time to the run's target, None: not reached
    machine: Machine
    commit: str | None  # 7 hex digits, None: not recorded
    dirty: bool | None  # None: not recorded
    flags: tuple[str, ...] = ()
    when: str | None = None  # ISO day or UTC time the run started
    # both runs on an idle machine (compare.py's load: busy_share below IDLE_SHARE for each);
    # None: not recorded (runs before compare.py recorded the load, and the GPU suite's)
    idle: bool | None = None

    @property
    def ratio(self) -> float:
        return self.ours_end / self.peer_end

    @property
    def git_clean(self) -> bool:
        return self.commit is not None and self.dirty is False

    @property
    def clean(self) -> bool:
        """Clean code on an idle machine: the only pairs a headline pools."""
        return self.git_clean and self.idle is True


# A run counts as idle where the CPU others used meanwhile (and the hypervisor's
# steal) stayed below this share of the machine: compare.py's ``load.busy_share``.
IDLE_SHARE = 0.02


def idle_of(*rows: dict) -> bool | None:
    """Whether every one of compare.py's ``rows`` ran on an idle machine
    (None where a row records no load)."""
    shares = [(r.get("load") or {}).get("busy_share") if isinstance(r, dict) else None for r in rows]
    if any(not isinstance(x, (int, float)) for x in shares):
        return None
    return all(x < IDLE_SHARE for x in shares)


def pooled_ratio(pairs: list[Pair]) -> float:
    """compare.py's ratio over ``pairs``: the mean of ours' end-of-training
    clocks over the mean of the published recipe's."""
    return statistics.fmean(p.ours_end for p in pairs) / statistics.fmean(p.peer_end for p in pairs)


@dataclass
class Notes:
    """provenance.json: commits declared the same code, and start times."""

    same_code: list[dict] = field(default_factory=list)
    dates: dict[str, dict] = field(default_factory=dict)

    def code(self, commit: str | None) -> str | None:
        """The first commit of ``commit``'s declared group, else itself."""
        for group in self.same_code:
            if commit in group["commits"]:
                return group["commits"][0]
        return commit

    def date(self, folder: str) -> str | None:
        entry = self.dates.get(folder)
        return None if entry is None else entry["utc"]


def read_notes(folder: Path) -> Notes:
    path = folder / NOTES_FILE
    if not path.exists():
        return Notes()
    try:
        data = json.loads(path.read_text())
        notes = Notes(same_code=list(data.get("same_code", [])), dates=dict(data.get("dates", {})))
        for group in notes.same_code:
            if not (isinstance(group["commits"], list) and len(group["commits"]) > 1 and group["why"]
                    and group["kind"]):
                raise ValueError("each same_code entry needs two or more commits, a kind and a why")
        for entry in notes.dates.values():
            if not isinstance(entry["utc"], str):
                raise ValueError("each dates entry needs a utc string")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{path}: not the provenance notes ({type(e).__name__}: {e})") from None
    return notes


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: cannot be read as JSON ({type(e).__name__})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object")
    return data


def _runs_under(folder: Path) -> list[RunRecord]:
    return [read_run(p, COMMAND) for p in sorted(folder.rglob("run.json"))]


def _short(sha: object) -> str | None:
    return sha[:7] if isinstance(sha, str) and sha else None


def _dirty(*values: object) -> bool | None:
    known = [v for v in values if isinstance(v, bool)]
    return any(known) if known else None


def flags_of(command: list[str] | None) -> tuple[str, ...]:
    """The trainer flags of a run.json command line that change what runs
    (NEUTRAL_FLAGS and their values left out)."""
    if not command:
        return ()
    argv = list(command)
    for i, token in enumerate(argv):
        if token.endswith("dawnbench_fast.cifar") or token.endswith("dawnbench_fast/cifar"):
            argv = argv[i + 1:]
            break
    kept, i = [], 0
    while i < len(argv):
        name = argv[i].split("=", 1)[0]
        if name in NEUTRAL_FLAGS:
            i += 1 + (NEUTRAL_FLAGS[name] if "=" not in argv[i] else 0)
            continue
        kept.append(argv[i])
        i += 1
    return tuple(kept)


def machine_of(record: RunRecord | None, cpu: dict | None = None) -> Machine:
    """The machine class of a CPU run: run.json's cpu_info, else compare.py's
    provenance ``cpu`` (/proc/cpuinfo's 'model name', 'cpu family', 'model')."""
    info = (record.cpu if record else None) or {}
    vendor, family, model = info.get("vendor"), info.get("family"), info.get("model")
    name = info.get("model_name")
    if family is None and cpu:
        family, model, name = cpu.get("cpu family"), cpu.get("model"), cpu.get("model name")
    threads = record.threads if record else None
    if family is None:
        hardware = record.hardware if record else "a CPU"
        return Machine(("cpu", "unknown", hardware), f"{hardware} (CPU family and model not recorded)")
    nick = cpu_class({**info, "vendor": vendor, "family": family, "model": model})
    label = f"{name or vendor or 'CPU'}, family {family} model {model}" + (f" ({nick})" if nick else "")
    label += f", {threads} threads" if threads else ""
    return Machine(("cpu", str(family), str(model), threads), label)


def _match(records: list[RunRecord], seed: int, end_clock: float) -> RunRecord | None:
    """Ours' run.json of a compare.json row: the same seed and end clock."""
    found = [r for r in records if r.seed == seed and abs(r.end_clock - end_clock) <= END_CLOCK_TOLERANCE_S]
    return min(found, key=lambda r: abs(r.end_clock - end_clock)) if found else None


def _day_of(record: RunRecord | None) -> str | None:
    """The day the DAWNBench training JSON beside a run states, if any."""
    if record is None:
        return None
    days = [d for d in map(timestamp_of, sorted(record.path.parent.glob("*.json"))) if d]
    return min(days) if days else None


def compare_pairs(path: Path, notes: Notes) -> list[Pair]:
    """The pairs of one compare.json, each joined with ours' run.json."""
    data = _load(path)
    try:
        rows = data["rows"]
        ours = {int(r["seed"]): r for r in rows if r["side"] == "ours"}
        peer = {int(r["seed"]): r for r in rows if r["side"] == "peer"}
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{path}: not compare.py's JSON (rows: {type(e).__name__} {e})") from None
    prov = data.get("provenance") if isinstance(data.get("provenance"), dict) else {}
    records = _runs_under(path.parent)
    pairs = []
    for seed in sorted(ours.keys() & peer.keys()):
        o, q = ours[seed], peer[seed]
        rec = _match(records, seed, float(o["end_clock"]))
        git = (rec.git if rec else None) or {}
        flags = flags_of(rec.command) if rec else tuple(data.get("extra") or ())
        when = prov.get("started_utc") or notes.date(path.parent.name) or _day_of(rec)
        pairs.append(Pair(source=path, seed=seed, ours_end=float(o["end_clock"]),
                          peer_end=float(q["end_clock"]), ours_top1=float(o["acc"]) / 100,
                          ours_tta=o.get("to_target"),
                          machine=machine_of(rec, prov.get("cpu")),
                          commit=_short(git.get("sha")) or _short(prov.get("commit")),
                          dirty=_dirty(git.get("dirty"), prov.get("dirty")), flags=flags, when=when,
                          idle=idle_of(o, q)))
    return pairs


def _committed_run(folder: Path, recorded: str | None, records: list[RunRecord]) -> RunRecord | None:
    """The run.json committed under ``folder`` that the suite recorded at
    ``recorded`` (a path on the GPU machine): the longest tail of that path
    that exists under the folder."""
    if not recorded:
        return None
    parts = Path(recorded).parts
    by_path = {r.path.resolve(): r for r in records}
    for k in range(len(parts) - 1, 0, -1):
        hit = by_path.get((folder / Path(*parts[-k:])).resolve())
        if hit is not None:
            return hit
    return None


def not_a_measurement(data: dict) -> str | None:
    """Why a suite.json's peer part is no comparison, or None: a dry run
    (the suite's or the part's ``dry_run``: the CPU at tiny sizes, no
    timing) or the published script's stand-in (the part's ``standin``)."""
    peer = (data.get("parts") or {}).get("peer") or {}
    if data.get("dry_run") or peer.get("dry_run"):
        return "a dry run (dry_run true)"
    if peer.get("standin"):
        return "its peer is the published script's stand-in (parts.peer.standin true)"
    return None


def suite_pairs(path: Path, notes: Notes) -> list[Pair]:
    """The pairs of a GPU suite's peer part: within each block, ours' k-th
    run (by seed) beside the published recipe's k-th run. A dry run or a
    stand-in peer gives none, said in one line on stderr."""
    data = _load(path)
    peer = (data.get("parts") or {}).get("peer") or {}
    if not peer.get("blocks"):
        return []
    why = not_a_measurement(data)
    if why:
        print(f"note: {path}: left out of the results: {why}", file=sys.stderr)
        return []
    env = data.get("environment") or {}
    gpu = ((env.get("gpu") or {}).get("name")) or "a GPU (name not recorded)"
    machine = Machine(("gpu", gpu), gpu)
    records = _runs_under(path.parent)
    suite_git = env.get("git") or {}
    pairs = []
    for block in peer["blocks"]:
        ours = sorted((block.get("ours") or {}).get("runs") or [], key=lambda r: r["seed"])
        theirs = (block.get("peer") or {}).get("runs") or []
        for o, q in zip(ours, theirs, strict=False):  # a stopped block pairs what both sides finished
            rec = _committed_run(path.parent, o.get("run_json"), records)
            git = (rec.git if rec else None) or suite_git
            pairs.append(Pair(source=path, seed=int(o["seed"]), ours_end=float(o["end_clock_s"]),
                              peer_end=float(q["time_seconds"]), ours_top1=float(o["final_top1"]),
                              ours_tta=o.get("time_to_target_s"), machine=machine,
                              commit=_short(git.get("sha")), dirty=_dirty(git.get("dirty")),
                              flags=flags_of(rec.command) if rec else (),
                              when=peer.get("started") or notes.date(path.parent.name)))
    return pairs


def read_pairs(folder: Path, notes: Notes) -> list[Pair]:
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such folder; pass the folder of committed runs (docs/results)")
    pairs = []
    for path in sorted(folder.rglob(COMPARE_FILE)):
        pairs += compare_pairs(path, notes)
    for path in sorted(folder.rglob(SUITE_FILE)):
        pairs += suite_pairs(path, notes)
    return pairs
