"""docs/ARCHITECTURE.md's map of the rooms matches the tree.

The map (between the ``rooms:start`` and ``rooms:end`` markers) is generated
from the source: every room of tests/test_house.py's FLOORS, floor by floor,
with its modules. A module added, moved or removed without the map following
fails here; ``python tests/test_architecture_doc.py`` rewrites the map.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_house import FLOORS, MODULES, room  # noqa: E402

DOC = ROOT / "docs" / "ARCHITECTURE.md"
START, END = "<!-- rooms:start -->", "<!-- rooms:end -->"
# where each room's source lives, for the map's first column
FOLDER = {"kernels": "kernels/", "csrc": "csrc/", "roofline": "roofline/"}


def _where(name: str) -> str:
    if name in FOLDER:
        return FOLDER[name]
    if name == "dawnbench_fast":
        return "dawnbench_fast/__init__.py"
    if (ROOT / "dawnbench_fast" / name).is_dir():
        return f"dawnbench_fast/{name}/"
    return f"dawnbench_fast/{name}.py"


def render() -> str:
    """The map: one row per room, floor by floor, lowest first."""
    by_room: dict[str, list[str]] = {}
    for module in MODULES:
        parts = module.split(".")
        if len(parts) > 2:  # a module inside a room's folder
            by_room.setdefault(room(module), []).append(".".join(parts[2:]))
        else:
            by_room.setdefault(room(module), [])
    lines = ["| floor | room | modules |", "|---|---|---|"]
    for level, rooms in enumerate(FLOORS):
        for name in rooms:
            mods = ", ".join(sorted(by_room.get(name, []))) or "(the module itself)"
            lines.append(f"| {level} | `{_where(name)}` | {mods} |")
    return "\n".join(lines)


BLOCK = re.compile(re.escape(START) + r"\n(.*?)\n?" + re.escape(END), re.S)


def _block(text: str) -> str:
    m = BLOCK.search(text)
    assert m, f"{DOC}: no {START} ... {END} block"
    return m.group(1)


def test_the_map_of_rooms_matches_the_tree():
    assert _block(DOC.read_text()) == render(), \
        "docs/ARCHITECTURE.md's map is stale: run `python tests/test_architecture_doc.py`"


def test_the_map_changes_when_a_module_does(monkeypatch):
    import test_house

    before = render()
    monkeypatch.setitem(test_house.MODULES, "dawnbench_fast.training.new_thing", ROOT / "x.py")
    assert render() != before and "new_thing" in render()


if __name__ == "__main__":
    text = DOC.read_text()
    _block(text)
    DOC.write_text(BLOCK.sub(lambda m: f"{START}\n{render()}\n{END}", text))
    print(f"{DOC}: map rewritten")
