"""``python -m tools.results``: README's results
table is what the committed run files give, pooled over every pair of the
same code, and a dirty or unknown provenance is never a headline. Reads
files only: no training."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dawnbench_fast.config.overrides import ConfigError
from tools import results
from tools.results import main

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
README = ROOT / "README.md"
ZEN4 = {"vendor": "AuthenticAMD", "family": "25", "model": "17", "model_name": "AMD EPYC"}


def test_readme_table_is_what_the_run_files_give():
    held = results.embedded(README)
    built = results.markdown(RESULTS, ROOT)
    assert held == built, f"README.md's results table is stale; regenerate it: {results.REGENERATE}"


def test_the_command_checks_readme():
    assert main([str(RESULTS), "--check", str(README)]) == 0


def test_a_planted_difference_fails_the_check(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{results.BEGIN}\n{results.END}\n\nafter\n")
    assert main([str(RESULTS), "--write", str(readme)]) == 0
    assert main([str(RESULTS), "--check", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# x\n\n") and text.endswith(f"{results.END}\n\nafter\n")  # the rest kept
    ratio = re.search(r"\| (\d\.\d{3})", text).group(1)  # the first row's ratio, typed over
    typed = ratio[:-1] + str((int(ratio[-1]) + 1) % 10)
    readme.write_text(text.replace(f"| {ratio}", f"| {typed}", 1))
    capsys.readouterr()
    assert main([str(RESULTS), "--check", str(readme)]) == 1
    out = capsys.readouterr().out
    assert "\n-| " in out and "\n+| " in out and typed in out and results.REGENERATE in out


def test_no_markers_is_a_one_line_error(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("no table here\n")
    assert main([str(RESULTS), "--check", str(readme)]) == 2
    assert "needs one <!-- results:begin -->" in capsys.readouterr().err


def test_the_amx_row_pools_both_runs_of_its_code_and_is_no_headline():
    """The same CPU code ran twice on the AMX Xeon (0.557 and 0.419): one
    row over the six pairs, about 0.49, its dirty pairs named, not bold.
    Pairs that recorded no load (compare.py records it since) are "idle
    unknown" and no headline."""
    notes = results.read_notes(RESULTS)
    groups = results.groups_of(results.read_pairs(RESULTS, notes), notes)
    amx = next(g for g in groups if g.code == "dc3431e")
    assert len(amx.pairs) == 6 and amx.ratio == pytest.approx(0.492, abs=5e-4)
    assert not amx.headline and not amx.clean
    assert {p.seed for p in amx.pairs if p.dirty} == {1, 2}
    rows = [line for line in results.embedded(README).splitlines() if line.startswith("| ")]
    assert "0.419" not in "".join(rows)
    # the AMX Xeon's newest code (7dfbcf1) ran git-clean, but with no load on record: idle unknown, not bold;
    # the one bold figure is Zen 4's newest code, clean on an idle machine (compare.py's load recorded);
    # the class's older code, clean and idle too, is a row of its own and no headline
    bold = [row for row in rows if "**" in row]
    assert len(bold) == 1 and "| 8164f51 |" in bold[0] and "on an idle machine" in bold[0]
    older_rows = (("61a2e1e", "0.455"), ("3547af5", "0.464"), ("ce7a225", "0.472"), ("3a8aed3", "0.450"),
                  ("267a35c", "0.494"), ("7791d98", "0.506"))
    for code, ratio in older_rows:
        older = next(row for row in rows if f"| {code} |" in row)
        assert f"| {ratio} |" in older and "on an idle machine" in older
    newest = next(row for row in rows if "| 7dfbcf1 |" in row)
    assert "0.552 (3 of 3 pairs idle unknown)" in newest and "idle unknown: compare-issue43-amx" in newest


# -- made-up run folders -------------------------------------------------------


def _run_json(folder: Path, seed: int, end: float, top1: float, *, sha: str = "a" * 40,
              dirty: bool | None = False, cpu: dict | None = None, device: str = "cpu",
              flags: tuple[str, ...] = ()) -> None:
    folder.mkdir(parents=True)
    data = {"git": {"sha": sha, "dirty": dirty}, "cpu_info": cpu or ZEN4, "threads": 2, "device": device,
            "hardware": "AMD EPYC, 2 threads",
            "command": ["python", "-m", "dawnbench_fast.cifar", "--seed", str(seed), "--no-progress",
                        "--out", "/tmp/x", *flags],
            "config": {"target": 0.94},
            "result": {"seed": seed, "final_top1": top1,
                       "epochs": [{"epoch": 9, "clock_seconds": end, "top1": top1}]}}
    (folder / "run.json").write_text(json.dumps(data))


def _compare(folder: Path, pairs: list[tuple[int, float, float, float]], provenance: dict | None = None,
             run_files: bool = True, busy: dict[tuple[int, str], float | None] | None = None,
             **run_kw) -> None:
    """compare.json (and ours' run.json per seed) for (seed, ours, peer, top-1) pairs, each run
    on an idle machine (compare.py's ``load``) unless ``busy`` gives (seed, side) another
    busy_share, None for a run without a load record."""
    rows = []
    busy = busy or {}

    def load(seed: int, side: str) -> dict:
        share = busy.get((seed, side), 0.004)
        return {} if share is None else {"load": {"others_cpu_s": 1.0, "steal_s": 0.0, "busy_share": share}}

    for seed, ours, peer, top1 in pairs:
        rows += [{"side": "ours", "seed": seed, "acc": 100 * top1, "end_clock": ours,
                  "to_target": ours if top1 >= 0.94 else None, "wall": ours + 40, **load(seed, "ours")},
                 {"side": "peer", "seed": seed, "acc": 94.1, "end_clock": peer, "to_target": peer,
                  "wall": peer + 70, **load(seed, "peer")}]
        if run_files:
            _run_json(folder / f"ours-{seed}", seed, ours, top1, **run_kw)
    folder.mkdir(parents=True, exist_ok=True)
    data = {"rows": rows, "ratio": 0.0, "summary": {}}
    if provenance is not None:
        data["provenance"] = provenance
    (folder / "compare.json").write_text(json.dumps(data))


def _table(root: Path, notes: dict | None = None) -> tuple[list[results.Group], str]:
    if notes is not None:
        (root / results.NOTES_FILE).write_text(json.dumps(notes))
    n = results.read_notes(root)
    groups = results.groups_of(results.read_pairs(root, n), n)
    return groups, results.render(groups, n, root)


def test_pooled_ratio_is_the_mean_of_clocks_over_every_pair_and_the_newest_clean_code_is_bold(tmp_path):
    _compare(tmp_path / "old", [(0, 600.0, 1000.0, 0.941)], sha="b" * 40,
             provenance={"started_utc": "2026-01-01T00:00:00Z"})
    _compare(tmp_path / "new-1", [(0, 400.0, 1000.0, 0.942), (1, 500.0, 800.0, 0.939)],
             provenance={"started_utc": "2026-02-01T00:00:00Z"})
    _compare(tmp_path / "new-2", [(2, 300.0, 1200.0, 0.945)],
             provenance={"started_utc": "2026-02-02T00:00:00Z"})
    groups, text = _table(tmp_path)
    assert [g.code for g in groups] == ["aaaaaaa", "bbbbbbb"]  # the newest code first
    new = groups[0]
    # the mean of the clocks over the mean of the peer's, not a mean of per-pair ratios
    assert new.ratio == pytest.approx((400 + 500 + 300) / 3 / ((1000 + 800 + 1200) / 3))
    assert new.headline and not groups[1].headline
    row = next(line for line in text.splitlines() if "| aaaaaaa |" in line)
    assert f"**{new.ratio:.3f}**" in row and "3 (0.250-0.625)" in row and "| 0-2 |" in row
    assert "| 94.20 +- 0.30% | 2/3 |" in row and "| 350.0 +- 70.7 s |" in row  # seed 1 missed 94%
    assert "**" not in next(line for line in text.splitlines() if "| bbbbbbb |" in line)


def test_a_dirty_pair_is_labelled_and_takes_the_headline_away(tmp_path):
    _compare(tmp_path / "run", [(0, 400.0, 1000.0, 0.942), (1, 500.0, 1000.0, 0.943)])
    (tmp_path / "run" / "ours-1" / "run.json").write_text(
        (tmp_path / "run" / "ours-1" / "run.json").read_text().replace('"dirty": false', '"dirty": true'))
    groups, text = _table(tmp_path)
    assert not groups[0].headline and "**" not in text
    assert "0.450 (1 of 2 pairs dirty)" in text and "dirty: run seed 1" in text
    assert "the 1 clean pair alone: 0.400" in text


@pytest.mark.parametrize(("share", "label"), [(0.05, "busy"), (0.02, "busy"), (None, "idle unknown")])
def test_a_busy_or_unrecorded_load_is_labelled_and_takes_the_headline_away(tmp_path, share, label):
    """Clean code is not enough: both runs of every pair on an idle machine
    (busy_share below 0.02), else the row is no headline and says why."""
    _compare(tmp_path / "run", [(0, 400.0, 1000.0, 0.942), (1, 500.0, 1000.0, 0.943)],
             busy={(1, "peer"): share})
    groups, text = _table(tmp_path)
    assert not groups[0].headline and not groups[0].clean and "**" not in text
    assert f"0.450 (1 of 2 pairs {label})" in text and f"{label}: run seed 1" in text
    assert "the 1 clean pair alone: 0.400" in text


def test_provenance_from_compare_json_without_run_files(tmp_path):
    """compare.py's own provenance serves where ours' run.json is missing, and
    its dirty flag counts; without either the provenance is unknown."""
    prov = {"commit": "c" * 40, "dirty": True, "started_utc": "2026-03-01T00:00:00Z",
            "cpu": {"model name": "AMD EPYC", "cpu family": "25", "model": "17"}}
    _compare(tmp_path / "with", [(0, 400.0, 1000.0, 0.942)], provenance=prov, run_files=False)
    _compare(tmp_path / "without", [(0, 450.0, 1000.0, 0.942)], run_files=False)
    groups, text = _table(tmp_path)
    by_code = {g.code: g for g in groups}
    assert by_code["ccccccc"].pairs[0].dirty is True and "family 25 model 17" in groups[0].machine.label
    unknown = by_code[None]
    assert unknown.pairs[0].commit is None and not unknown.headline
    assert "1 of 1 pairs of unknown provenance" in text and "| not recorded |" in text


def test_declared_same_code_pools_and_its_seeds_are_checked(tmp_path):
    _compare(tmp_path / "first", [(0, 400.0, 1000.0, 0.942)], sha="d" * 40)
    _compare(tmp_path / "second", [(0, 300.0, 1000.0, 0.943)], sha="e" * 40)
    notes = {"same_code": [{"commits": ["ddddddd", "eeeeeee"], "kind": "same CPU path", "why": "Refactor."}]}
    groups, text = _table(tmp_path, notes)
    assert len(groups) == 1 and groups[0].ratio == pytest.approx(0.35)
    assert "| ddddddd = eeeeeee |" in text
    assert "The top-1 of seed(s) 0 differ between them: check the declaration." in text


def test_non_default_flags_make_a_row_of_their_own(tmp_path):
    _compare(tmp_path / "plain", [(0, 400.0, 1000.0, 0.942)])
    _compare(tmp_path / "epochs", [(1, 300.0, 1000.0, 0.931)], flags=("--epochs", "7"))
    groups, text = _table(tmp_path)
    assert sorted(g.flags for g in groups) == [(), ("--epochs", "7")]
    assert "flags `--epochs 7`" in text


def _suite(suite: Path, part: dict | None = None, top: dict | None = None) -> None:
    """A GPU suite's folder: suite.json with one block of two pairs (``part``
    merged into its peer part, ``top`` into the file) and ours' run files."""
    for seed, end in ((0, 2.8), (1, 2.6)):
        _run_json(suite / "ours_block0" / f"seed{seed}", seed, end, 0.941, dirty=True, device="cuda")
    ours = [{"seed": s, "final_top1": 0.941, "time_to_target_s": e, "end_clock_s": e,
             "run_json": f"/root/run/peer/ours_block0/seed{s}/run.json"} for s, e in ((1, 2.6), (0, 2.8))]
    peer = [{"run": "0", "tta_val_acc": 0.943, "time_seconds": 1.4}, {"run": "1", "tta_val_acc": 0.942,
                                                                      "time_seconds": 1.6}]
    data = {"parts": {"peer": {"started": "2026-04-01T00:00:00Z", "dry_run": False, "standin": False,
                               "blocks": [{"order": ["ours", "peer"], "ours": {"runs": ours},
                                           "peer": {"runs": peer}}], **(part or {})}},
            "environment": {"gpu": {"name": "NVIDIA H200"}, "git": {"sha": "f" * 40, "dirty": False}},
            **(top or {})}
    (suite / "suite.json").write_text(json.dumps(data))


def test_the_gpu_suite_pairs_each_block_and_reads_the_committed_run_files(tmp_path):
    _suite(tmp_path / "gpu")
    groups, text = _table(tmp_path)
    (g,) = groups
    assert g.machine.label == "NVIDIA H200" and g.ratio == pytest.approx(2.7 / 1.5)
    assert [(p.seed, p.peer_end) for p in g.pairs] == [(0, 1.4), (1, 1.6)]
    assert g.code == "aaaaaaa" and all(p.dirty for p in g.pairs)  # run.json's git, not the suite's
    assert "2 of 2 pairs dirty" in text and "no clean pair" in text


@pytest.mark.parametrize("part,top,why", [
    ({"dry_run": True}, None, "a dry run"),
    (None, {"dry_run": True}, "a dry run"),
    ({"standin": True}, None, "stand-in"),
    ({"dry_run": True, "standin": True}, None, "a dry run"),  # what measure.py --dry-run writes
], ids=["part-dry-run", "suite-dry-run", "standin", "both"])
def test_a_dry_run_or_a_stand_in_peer_is_no_comparison(tmp_path, capsys, part, top, why):
    """A committed dry run (its peer the stand-in, at tiny sizes) never enters
    the table as a GPU comparison: left out, said in one line on stderr."""
    _suite(tmp_path / "gpu", part, top)
    _compare(tmp_path / "cpu", [(0, 400.0, 1000.0, 0.942)])
    groups, text = _table(tmp_path)
    assert [g.machine.label for g in groups if "H200" in g.machine.label] == [] and len(groups) == 1
    assert "H200" not in text
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("note: ") and "gpu/suite.json" in line and why in line


def test_a_folder_without_comparisons_is_a_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match="no compare.json or GPU suite.json"):
        results.markdown(tmp_path, tmp_path)


def _in_history(commit: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT,
                          capture_output=True).returncode == 0


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_commits_declared_identical_have_the_same_code():
    """provenance.json's 'identical' groups: no package file differs (git;
    skipped where this checkout lacks their history)."""
    code = ["dawnbench_fast", "csrc", "kernels", "setup.py", "pyproject.toml"]
    for group in results.read_notes(RESULTS).same_code:
        if group["kind"] != "identical":
            continue
        first, *others = group["commits"]
        for other in others:
            if not (_in_history(first) and _in_history(other)):
                pytest.skip(f"{first} or {other} is not in this checkout's history")
            diff = subprocess.run(["git", "diff", "--name-only", first, other, "--", *code], cwd=ROOT,
                                  capture_output=True, text=True, check=True).stdout.split()
            assert diff == [], f"{first} and {other} are declared identical, but differ in {diff}"
