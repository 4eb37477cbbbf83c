"""docs/PERFORMANCE.md stays a page of current figures: within
its 400 lines, naming the command that regenerates README's results table
and every run behind its figures whose run.json records dirty code; the
journal's index lists every journal file, as the history moved there is
found through it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from dawnbench_fast.analyze import results

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
    under docs/results/ that records git.dirty true (its folder and run), and their count."""
    text = PERFORMANCE.read_text(encoding="utf-8")
    paragraph = text[text.index("**Dirty runs"):].split("\n\n")[0]
    words = " ".join(paragraph.split())
    dirty = _dirty_runs()
    assert f"{len(dirty)} run.json files" in words
    missing = [str(p) for p in dirty if p.parts[0] not in words or p.parent.name not in words]
    assert not missing, f"dirty runs PERFORMANCE.md does not name: {missing}"


def test_the_journal_index_lists_every_entry():
    index = (JOURNAL / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#]+\.md)\)", index))
    files = {p.name for p in JOURNAL.glob("*.md") if p.name != "README.md"}
    assert not files - linked, f"entries docs/journal/README.md does not list: {sorted(files - linked)}"
    assert not linked - files, f"docs/journal/README.md lists missing entries: {sorted(linked - files)}"
