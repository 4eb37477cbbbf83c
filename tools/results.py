"""``python -m tools.results [FOLDER]``: the results table that README.md
embeds, built from the committed run files under FOLDER (default
docs/results), never typed.

Regenerate README's table after adding runs (one command, from the
repository root):

    python -m tools.results docs/results --write README.md

``--check README.md`` exits 1 when README's table differs from what this
command prints (tests/tools/test_results.py runs it); without
either flag the table is printed.

What it reads (tools/result_files.py):

- every ``compare.json`` (written by compare.py, docs/FACTS.md "Outside
  instruments": ours and the published recipe's CPU port, run alternately,
  seed by seed), joined with ours' run.json of each seed in the same folder
  (the run whose seed and end-of-training clock match the row): the machine
  class (CPU vendor, family and model), the commit and whether tracked files
  differed from it (run.json ``git``). Newer compare.json files carry
  compare.py's own ``provenance`` (commit, dirty, CPU, start time): where
  both exist, a run is dirty if either says so;
- every ``suite.json`` of the GPU suite (tools/gpu_suite/) with a
  ``peer`` part: ours and the published recipe on the same GPU in blocks;
  ours' run.json files committed beside it give the commit, else the suite's
  ``environment.git``; a dry run (``dry_run``) or one whose peer is the
  published script's stand-in (``parts.peer.standin``) is no comparison:
  left out, with a one-line note on stderr;
- ``provenance.json`` in FOLDER: what the files do not record, written down
  by whoever ran them from the folders' README.md: commits whose trainer
  code is the same (so that their pairs pool), and the start time of
  folders whose files record none.

One row per machine class, code and non-default trainer flags: the ratio
pooled over every pair of that code (the mean of our end-of-training clocks
over all pairs divided by the mean of the published recipe's, as compare.py
computes it), the pair count and the range of per-pair ratios, ours' seeds,
final top-1 (mean, +- the sample std over seeds when there are several; a
seed run twice with the same top-1 counts once), how many reached the
target and the time to it (mean over the runs that reached it). A pair
whose run is dirty (run.json ``git.dirty`` true), whose provenance is
unknown, that ran on a busy machine (compare.json's per-run ``load``:
``busy_share`` at or above 0.02) or whose load was not recorded ("idle
unknown") is labelled so; the headline (the ratio in bold) is the newest
code of each machine class, only where every one of its pairs ran clean
code on an idle machine.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dawnbench_fast.runner import stopping

PROG = "python -m tools.results"
if __name__ == "__main__":  # first, before the imports below: a stop then is one line and 130 or 143
    stopping.catch_stops_from_start_up(PROG)

# after the handlers, on purpose
from dawnbench_fast import atomic  # noqa: E402
from dawnbench_fast.analyze.stats import describe  # noqa: E402
from dawnbench_fast.config.overrides import ConfigError  # noqa: E402
from dawnbench_fast.runner import cli  # noqa: E402
from tools.result_files import (  # noqa: E402
    COMMAND,
    NOTES_FILE,
    Machine,
    Notes,
    Pair,
    pooled_ratio,
    read_notes,
    read_pairs,
)

__all__ = ["COMMAND", "NOTES_FILE", "Machine", "Notes", "Pair", "pooled_ratio", "read_notes", "read_pairs"]

DEFAULT_FOLDER = "docs/results"
BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
REGENERATE = "python -m tools.results docs/results --write README.md"


@dataclass
class Group:
    """A row: every pair of one code on one machine class, with one set of flags."""

    machine: Machine
    code: str | None
    flags: tuple[str, ...]
    pairs: list[Pair]
    headline: bool = False

    @property
    def ratio(self) -> float:
        return pooled_ratio(self.pairs)

    def commits(self, notes: Notes) -> list[str]:
        """Its commits: a declared group's in the declared order, else by when they ran."""
        mine = {p.commit for p in self.pairs if p.commit}
        declared = next((grp["commits"] for grp in notes.same_code if self.code in grp["commits"]), [])
        first = [c for c in declared if c in mine]
        return first + sorted(mine - set(first), key=lambda c: min((p.when or "") for p in self.pairs
                                                                   if p.commit == c))

    @property
    def when(self) -> str:
        return max((p.when or "") for p in self.pairs)

    @property
    def clean(self) -> bool:
        return all(p.clean for p in self.pairs)


def build_parser() -> argparse.ArgumentParser:
    p = cli.OneLineParser(prog=PROG, description=__doc__,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", nargs="?", default=DEFAULT_FOLDER,
                   help=f"the folder of committed runs (default {DEFAULT_FOLDER})")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", metavar="FILE",
                      help=f"exit 1 when FILE's table (between {BEGIN} and {END}) differs from this one")
    mode.add_argument("--write", metavar="FILE", help="replace FILE's table (between the same markers)")
    return p


def run(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    target = args.check or args.write
    base = Path(target).resolve().parent if target else Path.cwd()
    text = markdown(folder, base)
    if args.check:
        return check(Path(args.check), text)
    if args.write:
        write(Path(args.write), text)
        print(f"written: the results table of {args.write} ({text.count(chr(10)) + 1} lines)")
        return 0
    print(text)
    return 0


def groups_of(pairs: Iterable[Pair], notes: Notes) -> list[Group]:
    """Rows: machine classes in label order, each class's newest code first;
    the headline is the newest code of a class where all its pairs are clean."""
    by_key: dict[tuple, Group] = {}
    for p in pairs:
        key = (p.machine, notes.code(p.commit), p.flags)
        by_key.setdefault(key, Group(p.machine, key[1], p.flags, [])).pairs.append(p)
    groups = sorted(by_key.values(), key=lambda g: (g.machine.label, _reverse(g.when), g.code or ""))
    seen: set = set()
    for g in groups:
        if g.machine not in seen:
            seen.add(g.machine)
            g.headline = g.clean and not g.flags
    return groups


def _reverse(text: str) -> tuple:
    return tuple(-ord(c) for c in text) + (1,)  # newest first; a longer (timed) stamp before its day


# -- rendering -------------------------------------------------------------


def _seeds(seeds: list[int]) -> str:
    """0-2, 4, 7-9; ``each twice`` when every seed ran twice."""
    counts = Counter(seeds)
    unique = sorted(counts)
    spans, start = [], unique[0]
    for a, b in zip(unique, unique[1:] + [None], strict=True):
        if b != a + 1:
            spans.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    text = ", ".join(spans)
    times = set(counts.values())
    if times != {1}:
        text += " (each twice)" if times == {2} else " (" + ", ".join(
            f"{s} x{n}" for s, n in sorted(counts.items()) if n > 1) + ")"
    return text


def _one_per_seed(pairs: list[Pair]) -> list[Pair]:
    """A seed run again with the same top-1 (the same code's same model)
    counts once for the accuracy; differing repeats all count."""
    seen, kept = set(), []
    for p in pairs:
        if (p.seed, p.ours_top1) not in seen:
            seen.add((p.seed, p.ours_top1))
            kept.append(p)
    return kept


def _mean_std(values: list[float], scale: float, digits: int, unit: str) -> str:
    d = describe(values)
    if not d["n"]:
        return "-"
    if d["std"] is None:
        return f"{scale * d['mean']:.{digits}f}{unit}"
    return f"{scale * d['mean']:.{digits}f} +- {scale * d['std']:.{digits}f}{unit}"


def _time(pairs: list[Pair]) -> str:
    reached = [p.ours_tta for p in pairs if p.ours_tta is not None]
    d = describe(reached)
    if not d["n"]:
        return "not reached"
    digits = 1 if d["mean"] >= 10 else 2
    std = "" if d["std"] is None else f" +- {d['std']:.{digits}f}"
    return f"{d['mean']:.{digits}f}{std} s"


def _link(path: Path, base: Path) -> str:
    folder = path.parent
    target = folder / "README.md" if (folder / "README.md").exists() else path
    return f"[{folder.name}]({Path(os.path.relpath(target.resolve(), base)).as_posix()})"


# What keeps a pair from being clean, each with its test: code, then the machine's load.
UNCLEAN = (("dirty", lambda p: p.dirty is True),
           ("unknown", lambda p: p.commit is None or p.dirty is None),
           ("busy", lambda p: p.idle is False),
           ("idle unknown", lambda p: p.idle is None))


def _provenance(g: Group) -> str:
    if g.clean:
        text = "clean: every run at its commit, on an idle machine"
    else:
        parts = []
        for what, test in UNCLEAN:
            by_source: dict[str, list[int]] = {}
            for p in g.pairs:
                if test(p):
                    by_source.setdefault(p.source.parent.name, []).append(p.seed)
            if by_source:
                where = "; ".join(f"{name} seed{'s' if len(s) > 1 else ''} {_seeds(s)}"
                                  for name, s in by_source.items())
                parts.append(f"{what}: {where}")
        text = "; ".join(parts)
        clean = [p for p in g.pairs if p.clean]
        if clean:
            plural = "s" if len(clean) > 1 else ""
            text += f"; the {len(clean)} clean pair{plural} alone: {pooled_ratio(clean):.3f}"
        else:
            text += "; no clean pair"
    if g.flags:
        text += f"; flags `{' '.join(g.flags)}`"
    return text


def _unclean(g: Group) -> str:
    """`` (2 of 6 pairs dirty, 6 idle unknown)``: beside a ratio that is no headline for it."""
    dirty = sum(p.dirty is True for p in g.pairs)
    unknown = sum(p.dirty is not True and not p.git_clean for p in g.pairs)
    busy = sum(p.idle is False for p in g.pairs)
    idle_unknown = sum(p.idle is None for p in g.pairs)
    counts = ((dirty, "dirty"), (unknown, "of unknown provenance"), (busy, "busy"),
              (idle_unknown, "idle unknown"))
    what = [f"{n} of {len(g.pairs)} pairs {w}" for n, w in counts if n]
    return f" ({', '.join(what)})" if what else ""


def render(groups: list[Group], notes: Notes, base: Path) -> str:
    """The Markdown table and its notes (links relative to ``base``)."""
    head = ["machine class", "code", "date", "ratio to the published recipe (pooled)",
            "pairs (per-pair range)", "ours: seeds", "top-1", "reached 94%", "time to 94%", "provenance",
            "files"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in groups:
        ratios = [p.ratio for p in g.pairs]
        acc = _one_per_seed(g.pairs)
        ratio = f"{g.ratio:.3f}"
        sources = sorted({p.source for p in g.pairs})
        cells = [g.machine.label,
                 " = ".join(g.commits(notes)) or "not recorded",
                 ", ".join(sorted({(p.when or "not recorded")[:10] for p in g.pairs})),
                 f"**{ratio}**" if g.headline else ratio + _unclean(g),
                 f"{len(g.pairs)} ({min(ratios):.3f}-{max(ratios):.3f})" if len(ratios) > 1 else
                 f"1 ({ratios[0]:.3f})",
                 _seeds([p.seed for p in g.pairs]),
                 _mean_std([p.ours_top1 for p in acc], 100, 2, "%"),
                 f"{sum(p.ours_tta is not None for p in acc)}/{len(acc)}",
                 _time(g.pairs),
                 _provenance(g),
                 ", ".join(_link(s, base) for s in sources)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Ratio: the mean of ours' end-of-training clocks over every pair of that code on that "
              "machine class, divided by the published recipe's mean (below 1, ours is faster), as "
              "compare.py computes it on the CPU (docs/FACTS.md, \"Outside instruments\") and the GPU "
              "suite's peer part on a GPU (docs/GPU_SUITE.md); a GPU block's k-th runs of the two sides "
              "make its pairs. Top-1 and reached count a seed run twice with the same top-1 once; the "
              "time to 94% is the mean over every run that reached it. A ratio in bold is a machine class's "
              "headline, its newest code, only where every pair ran clean code (run.json `git.dirty` "
              "false) on an idle machine (compare.py's `load.busy_share` below 0.02 for both runs of "
              "the pair); a dirty, busy or unknown provenance or load is never a headline, and pairs "
              "recorded before compare.py measured the load are \"idle unknown\"."]
    used = {c for g in groups for c in g.commits(notes)}
    for group in notes.same_code:
        shown = [c for c in group["commits"] if c in used]
        if len(shown) > 1:
            lines += ["", f"{' = '.join(shown)}: the same code ({group['kind']}), pooled. {group['why']}"
                      + _agreement(groups, shown)]
    lines += ["", f"Built by `{REGENERATE}` from the files under docs/results/ (compare.json, suite.json, "
              f"run.json, and {NOTES_FILE} for what they do not record); `--check README.md` tests it."]
    return "\n".join(lines)


def _agreement(groups: list[Group], commits: list[str]) -> str:
    """Whether seeds that ran at more than one of ``commits`` on one machine
    class reached the same top-1 (the same code gives the same model on the CPU)."""
    same, differ = 0, []
    for g in groups:
        by_seed: dict[int, set[float]] = {}
        for p in g.pairs:
            if p.commit in commits:
                by_seed.setdefault(p.seed, set()).add(p.ours_top1)
        multi = {s: v for s, v in by_seed.items()
                 if len({p.commit for p in g.pairs if p.seed == s and p.commit in commits}) > 1}
        same += sum(len(v) == 1 for v in multi.values())
        differ += [s for s, v in multi.items() if len(v) > 1]
    if differ:
        return f" The top-1 of seed(s) {_seeds(differ)} differ between them: check the declaration."
    return f" The {same} seed(s) run at more than one of them give the same top-1." if same else ""


def markdown(folder: Path, base: Path) -> str:
    """The table the command prints for ``folder``, links relative to ``base``."""
    notes = read_notes(folder)
    groups = groups_of(read_pairs(folder, notes), notes)
    if not groups:
        raise ConfigError(f"{folder}: no compare.json or GPU suite.json with a peer part under it: no table")
    return render(groups, notes, base)


# -- the README block --------------------------------------------------------


def _split(path: Path) -> tuple[str, str, str]:
    """(before the table, the table, after it) of a file with the markers."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({type(e).__name__})") from None
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ConfigError(f"{path}: needs one {BEGIN} line before one {END} line around the table")
    before, rest = text.split(BEGIN, 1)
    block, after = rest.split(END, 1)
    return before + BEGIN, block, END + after


def embedded(path: Path) -> str:
    """The table ``path`` holds between the markers."""
    return _split(path)[1].strip("\n")


def check(path: Path, text: str) -> int:
    """0 when ``path``'s table is ``text``, else 1 and the difference."""
    held = embedded(path)
    if held == text:
        print(f"{path}: the results table is what the run files give")
        return 0
    diff = difflib.unified_diff(held.splitlines(), text.splitlines(), f"{path} (held)", "the run files",
                                lineterm="")
    print("\n".join(diff))
    print(f"{path}: the results table differs from the run files; regenerate it: {REGENERATE}")
    return 1


def write(path: Path, text: str) -> None:
    before, _, after = _split(path)
    atomic.write_text(path, f"{before}\n{text}\n{after}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return cli.guarded(PROG, lambda: run(build_parser().parse_args(argv)))


if __name__ == "__main__":
    sys.exit(stopping.run_main(main))
