"""docs/PERFORMANCE.md stays a page of current figures: within
its 400 lines, naming the command that regenerates README's results table
and every run behind its figures whose run.json records dirty code; the
journal's index lists every journal file, as the history moved there is
found through it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tools import results

ROOT = Path(__file__).resolve().parents[1]
PERFORMANCE = ROOT / "docs" / "PERFORMANCE.md"
JOURNAL = ROOT / "docs" / "journal"
MAX_LINES = 400  # the page's own rule: current figures only, history to the journal


def test_performance_is_within_its_line_budget():
    n = len(PERFORMANCE.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, (f"docs/PERFORMANCE.md has {n} lines (at most {MAX_LINES}): move superseded "
                            "figures and old runs' details to a docs/journal/ entry and index it")


def test_performance_names_the_regeneration_command():
    assert results.REGENERATE in PERFORMANCE.read_text(encoding="utf-8")


def _dirty_runs() -> list[Path]:
    found = []
    for path in sorted((ROOT / "docs" / "results").rglob("run.json")):
        if (json.loads(path.read_text()).get("git") or {}).get("dirty") is True:
            found.append(path.relative_to(ROOT / "docs" / "results"))
    return found


def test_performance_lists_every_dirty_run():
    """The paragraph "Dirty runs behind quoted figures" names each run.json
    under docs/results/ that records git.dirty true, by its exact folder path
    (``folder/run``, or a bare run name after a ``folder/run`` of the same
    folder), and their count; every ``folder/run`` it writes is a run folder."""
    text = PERFORMANCE.read_text(encoding="utf-8")
    paragraph = text[text.index("**Dirty runs"):].split("\n\n")[0]
    words = " ".join(paragraph.split())
    dirty = _dirty_runs()
    assert f"{len(dirty)} run.json files" in words
    named, written = _named_runs(words)
    missing = [str(p) for p in dirty if p.parent.as_posix() not in named]
    assert not missing, f"dirty runs PERFORMANCE.md does not name: {missing}"
    results = ROOT / "docs" / "results"
    absent = [n for n in written if not (results / n / "run.json").is_file()]
    assert not absent, f"PERFORMANCE.md names runs that are not run folders under docs/results/: {absent}"


NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_.-]+)*")


def _named_runs(words: str) -> tuple[set[str], list[str]]:
    """The run folders (relative to docs/results/) a paragraph names, exactly:
    ``folder/run`` in full (also returned apart, in order), and a bare name
    after it as a run of the same folder ("compare-x/ours-1 and ours-2"); a
    bare name is also itself (a run folder directly under docs/results/)."""
    named: set[str] = set()
    written: list[str] = []
    folder = ""
    for token in (t.rstrip(".") for t in NAME.findall(words)):
        if token.startswith("docs/"):
            continue
        if "/" in token:
            named.add(token)
            written.append(token)
            folder = token.rsplit("/", 1)[0]
        else:
            named.add(token)
            if folder:
                named.add(f"{folder}/{token}")
    return named, written


def test_the_journal_index_lists_every_entry():
    index = (JOURNAL / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#]+\.md)\)", index))
    files = {p.name for p in JOURNAL.glob("*.md") if p.name != "README.md"}
    assert not files - linked, f"entries docs/journal/README.md does not list: {sorted(files - linked)}"
    assert not linked - files, f"docs/journal/README.md lists missing entries: {sorted(linked - files)}"
