"""Which commit a run's code is, proved from the files themselves.

run.json and the GPU suite record ``git rev-parse HEAD`` and whether the
checkout differs from it. On a GPU machine reached by a command runner the working tree is a copy
whose ``.git`` may be older than the files beside it: there git reads the
files as "dirty" against an old commit (all three seeds of the first H200
run were so recorded). A *source stamp* closes the gap: made in the checkout the files
are carried from, it lists the commit and the git blob id of every file in
that commit's tree; where the files land, each one is hashed again the way
git hashes a blob. All equal: the code is that commit, clean, whatever the
local ``.git`` says. Any file changed or missing: dirty, and the files are named.

    # where the files are carried from:
    python -m dawnbench_fast.reporting.provenance stamp .gpu/kit/source.json
    # where they run (run.json and suite.json take the stamp's commit, verified):
    DAWNBENCH_SOURCE_STAMP=.gpu/kit/source.json python -m tools.gpu_suite ...
    # one line; exit status 1 if a file differs from the stamp's commit:
    python -m dawnbench_fast.reporting.provenance check .gpu/kit/source.json

Files the commit does not track (build outputs, data) are not checked.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from dawnbench_fast.atomic import write_json

STAMP_ENV = "DAWNBENCH_SOURCE_STAMP"  # a stamp's path: run.json and the GPU suite read it
REPO = Path(__file__).resolve().parents[2]
STAMP_VERSION = 1


class StampError(Exception):
    """A stamp that cannot be made or read: one line for the user."""


def blob_id(data: bytes) -> str:
    """The id git gives a file's contents (``git hash-object``): SHA-1 of a header and the bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _git(root: Path, *args: str) -> str:
    r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise StampError(f"git {' '.join(args)} in {root}: {r.stderr.strip() or 'failed'}")
    return r.stdout


def make_stamp(root: Path | None = None) -> dict:
    """The commit checked out at ``root`` and the blob id of each regular file of
    its tree, with the files of the working tree that differ from it now."""
    root = root or REPO
    try:
        commit = _git(root, "rev-parse", "HEAD").strip()
        listing = _git(root, "ls-tree", "-r", "-z", "HEAD")
    except (OSError, subprocess.SubprocessError) as e:
        raise StampError(f"{root}: not a git checkout git can read ({e})") from e
    files = {}
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob" and mode in ("100644", "100755"):  # links and submodules are not files to hash
            files[path] = sha
    made = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    stamp = {"version": STAMP_VERSION, "commit": commit, "made": made, "files": files}
    stamp["changed_at_stamp"] = changed_files(stamp, root)
    return stamp


def changed_files(stamp: dict, root: Path) -> list[str]:
    """The stamp's files that are missing under ``root`` or differ from the commit's."""
    changed = []
    for path, sha in stamp["files"].items():
        try:
            if blob_id((root / path).read_bytes()) != sha:
                changed.append(path)
        except OSError:
            changed.append(path)
    return changed


def read_stamp(path: str | os.PathLike) -> dict:
    """A stamp written by :func:`make_stamp`, or a StampError naming the file."""
    try:
        stamp = json.loads(Path(path).read_text())
    except OSError as e:
        raise StampError(f"{path}: cannot read the source stamp ({e.strerror or e}); make one with "
                         f"`python -m dawnbench_fast.reporting.provenance stamp {path}`") from e
    except ValueError as e:
        raise StampError(f"{path}: not a source stamp (invalid JSON: {e}); make it again") from e
    if (not isinstance(stamp, dict) or stamp.get("version") != STAMP_VERSION
            or not isinstance(stamp.get("commit"), str) or not isinstance(stamp.get("files"), dict)):
        raise StampError(f"{path}: not a version-{STAMP_VERSION} source stamp; make it again")
    return stamp


def verified_revision(path: str | os.PathLike, root: Path | None = None) -> dict:
    """``{"sha", "dirty", ...}`` as run.json's ``git`` holds it, proved from the
    files under ``root`` (this checkout) against the stamp at ``path`` instead of a local ``.git``."""
    stamp = read_stamp(path)
    changed = changed_files(stamp, root or REPO)
    return {"sha": stamp["commit"], "dirty": bool(changed), "source": "stamp",
            "stamp": str(path), "stamp_made": stamp.get("made"), "files_checked": len(stamp["files"]),
            "changed": changed[:50]}


def stamp_revision() -> dict | None:
    """The verified revision where ``DAWNBENCH_SOURCE_STAMP`` names a stamp, else
    None. A stamp that cannot be read is recorded as unknown provenance, never
    as clean: the run goes on, its record says why."""
    path = os.environ.get(STAMP_ENV)
    if not path:
        return None
    try:
        return verified_revision(path)
    except StampError as e:
        return {"sha": None, "dirty": None, "source": "stamp", "stamp": path, "error": str(e)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dawnbench_fast.reporting.provenance",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("stamp", help="write the stamp of this checkout's commit").add_argument("out")
    sub.add_parser("check", help="check this tree against a stamp").add_argument("stamp")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "stamp":
            stamp = make_stamp()
            write_json(Path(args.out), stamp)
            dirty = stamp["changed_at_stamp"]
            print(f"{args.out}: commit {stamp['commit'][:12]}, {len(stamp['files'])} files"
                  + (f"; {len(dirty)} differ from it here: {', '.join(dirty[:5])}" if dirty else ", clean"))
            return 0
        rev = verified_revision(args.stamp)
    except StampError as e:
        print(f"provenance: {e}", file=sys.stderr)
        return 2
    changed = rev["changed"]
    state = f"dirty ({len(changed)} files differ: {', '.join(changed[:5])})" if rev["dirty"] else "clean"
    print(f"{REPO}: commit {rev['sha'][:12]}, {state}, {rev['files_checked']} files checked")
    return 1 if rev["dirty"] else 0


if __name__ == "__main__":
    sys.exit(main())
