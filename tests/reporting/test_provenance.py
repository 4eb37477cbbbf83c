"""Source stamps (dawnbench_fast.reporting.provenance): a copied checkout
proves which commit its files are, whatever its own .git says."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from dawnbench_fast.reporting import bench, provenance


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root,
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("print('a')\n")
    (root / "b.txt").write_bytes(bytes(range(256)) * 3)  # not text: hashed as bytes
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "one")
    return root


def test_blob_id_is_what_git_computes(checkout):
    for name in ("pkg/a.py", "b.txt"):
        want = _git(checkout, "hash-object", name).strip()
        assert provenance.blob_id((checkout / name).read_bytes()) == want


def test_a_copy_without_git_is_proved_clean_then_dirty_naming_the_file(checkout, tmp_path):
    stamp = provenance.make_stamp(checkout)
    assert stamp["commit"] == _git(checkout, "rev-parse", "HEAD").strip()
    assert sorted(stamp["files"]) == ["b.txt", "pkg/a.py"] and stamp["changed_at_stamp"] == []
    path = tmp_path / "source.json"
    path.write_text(json.dumps(stamp))
    copy = tmp_path / "copy"
    shutil.copytree(checkout, copy, ignore=shutil.ignore_patterns(".git"))
    rev = provenance.verified_revision(path, copy)
    assert rev["sha"] == stamp["commit"] and rev["dirty"] is False and rev["files_checked"] == 2
    (copy / "pkg" / "a.py").write_text("print('b')\n")
    (copy / "b.txt").unlink()
    rev = provenance.verified_revision(path, copy)
    assert rev["dirty"] is True and rev["changed"] == ["b.txt", "pkg/a.py"]


def test_a_stale_git_in_the_copy_does_not_decide(checkout, tmp_path):
    """A copied checkout's case (as on a GPU machine): .git one commit behind the files."""
    copy = tmp_path / "copy"
    shutil.copytree(checkout, copy)  # .git as of commit one
    (checkout / "pkg" / "a.py").write_text("print('two')\n")
    _git(checkout, "commit", "-q", "-am", "two")
    shutil.copy(checkout / "pkg" / "a.py", copy / "pkg" / "a.py")
    assert _git(copy, "status", "--porcelain", "--untracked-files=no").strip()  # git calls it dirty
    path = tmp_path / "source.json"
    path.write_text(json.dumps(provenance.make_stamp(checkout)))
    rev = provenance.verified_revision(path, copy)
    assert rev["dirty"] is False and rev["sha"] == _git(checkout, "rev-parse", "HEAD").strip()


def test_run_json_takes_the_stamp_from_the_environment(checkout, tmp_path, monkeypatch):
    path = tmp_path / "source.json"
    stamp = provenance.make_stamp(checkout)
    path.write_text(json.dumps(stamp))
    monkeypatch.setattr(provenance, "REPO", checkout)
    monkeypatch.setenv(provenance.STAMP_ENV, str(path))
    rev = provenance.stamp_revision()
    assert rev is not None and rev["source"] == "stamp" and rev["dirty"] is False
    monkeypatch.setattr(provenance, "stamp_revision", lambda: rev)
    assert bench.git_revision() == rev
    monkeypatch.delenv(provenance.STAMP_ENV)
    monkeypatch.undo()
    assert bench.git_revision()["source"] == "git"


@pytest.mark.parametrize("content, says", [(None, "cannot read"), ("{not json", "invalid JSON"),
                                           ('{"version": 1, "commit": 3}', "not a version-1")])
def test_a_bad_stamp_is_one_line_and_never_clean(tmp_path, monkeypatch, capsys, content, says):
    path = tmp_path / "source.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(provenance.StampError, match=says):
        provenance.read_stamp(path)
    monkeypatch.setenv(provenance.STAMP_ENV, str(path))
    rev = provenance.stamp_revision()
    assert rev["sha"] is None and rev["dirty"] is None and says in rev["error"]
    assert provenance.main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0]


def test_the_command_stamps_and_checks_this_checkout(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert provenance.main(["stamp", str(out)]) == 0
    stamp = json.loads(out.read_text())
    assert "dawnbench_fast/__init__.py" in stamp["files"]
    rc = provenance.main(["check", str(out)])
    assert rc == (1 if stamp["changed_at_stamp"] else 0)
    assert stamp["commit"][:12] in capsys.readouterr().out
