"""Arrange ILSVRC-2012's flat validation folder into ``val/<synset>/``.

The official validation archive (ILSVRC2012_img_val.tar) unpacks to 50,000
files ``ILSVRC2012_val_00000001.JPEG`` ... in one folder, with no labels.
This module files them by class from a list of ``file,synset`` lines:

    python -m dawnbench_fast.data.imagenet.val_layout LIST FLAT_DIR OUT_DIR [--copy]

e.g. ``... val_list.csv ILSVRC2012_img_val/ imagenet/val``. Each image is
hard-linked into ``OUT_DIR/<synset>/`` (no extra disk space), or copied
where a link cannot be made (another file system) or with ``--copy``.
Running it again is harmless: files already in place are left alone.

Making the list. The labels ship in the development kit
(ILSVRC2012_devkit_t12.tar.gz), not with the images:

- ``data/ILSVRC2012_validation_ground_truth.txt`` has 50,000 lines; line k
  is the ILSVRC2012_ID (1..1000) of ``ILSVRC2012_val_<k as 8 digits>.JPEG``.
- Those IDs number the classes in the devkit's own order, given by
  ``data/meta.mat``: its ``synsets`` array pairs each ILSVRC2012_ID with a
  WordNet ID (WNID, e.g. ``n01751748``; entries with ID > 1000 are inner
  WordNet nodes, not classes). That order is NOT the sorted-synset order
  that class indices use here and in torchvision (where n01751748, sea
  snake, is index 65): never use an ID - 1 as a label.
- So map each line's ID to its WNID through meta.mat and write
  ``ILSVRC2012_val_00000001.JPEG,<WNID>`` lines. With SciPy:

      from scipy.io import loadmat
      syn = loadmat("ILSVRC2012_devkit_t12/data/meta.mat", squeeze_me=True)["synsets"]
      wnid = {int(s["ILSVRC2012_ID"]): str(s["WNID"]) for s in syn if int(s["ILSVRC2012_ID"]) <= 1000}
      ids = open("ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt").read().split()
      with open("val_list.csv", "w") as f:
          f.writelines(f"ILSVRC2012_val_{k:08d}.JPEG,{wnid[int(i)]}\\n" for k, i in enumerate(ids, 1))

The folder loader (folder.py) then gives each synset its sorted index, the
same as the training split's.

List format: one ``file,synset`` per line (a tab or spaces may separate them
instead of the comma); blank lines and lines starting with ``#`` are skipped.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from dawnbench_fast.data.imagenet.errors import DataError
from dawnbench_fast.data.imagenet.folder import is_image_file

_SEP = re.compile(r"\s*[,\t ]\s*")


def read_list(path: str | Path) -> list[tuple[str, str]]:
    """The (file, synset) pairs of a list file; errors name the line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror or e}); give the file,synset list "
                        f"(docs/IMAGENET.md says how to make it)") from e
    pairs: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = _SEP.split(line)
        if len(parts) != 2 or not all(parts) or any("/" in p or "\\" in p or p in (".", "..") for p in parts):
            raise DataError(f"{path}:{number}: expected 'file,synset' (bare names), got {line!r}")
        if parts[0] in seen:
            raise DataError(f"{path}:{number}: {parts[0]} is listed again (first on line {seen[parts[0]]})")
        seen[parts[0]] = number
        pairs.append((parts[0], parts[1]))
    if not pairs:
        raise DataError(f"{path}: no 'file,synset' lines")
    return pairs


@dataclass
class Arranged:
    linked: int = 0
    copied: int = 0
    already: int = 0  # in place from an earlier run
    unlisted: int = 0  # images in the flat folder the list does not name


def _same(a: Path, b: Path) -> bool:
    """Whether ``b`` is ``a`` already: the same file (a link) or the same bytes."""
    if os.path.samefile(a, b):
        return True
    return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()


def _place(src: Path, dest: Path, copy: bool, done: Arranged) -> None:
    if dest.exists():
        if not _same(src, dest):
            raise DataError(f"{dest}: exists and differs from {src}; remove it or choose an empty OUT_DIR")
        done.already += 1
        return
    if not copy:
        try:
            os.link(src, dest)
            done.linked += 1
            return
        except OSError:  # another file system, or links not allowed: copy instead
            pass
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)  # a stopped run leaves no half-copied image under the real name
    done.copied += 1


def arrange(pairs: list[tuple[str, str]], flat_dir: str | Path, out_dir: str | Path, *,
            copy: bool = False) -> Arranged:
    """Put each listed file of ``flat_dir`` into ``out_dir/<synset>/``
    (hard link, else copy). Every listed file must exist."""
    flat, out = Path(flat_dir), Path(out_dir)
    if not flat.is_dir():
        raise DataError(f"{flat}: no such folder; give the folder of the unpacked validation images")
    missing = [f for f, _ in pairs if not (flat / f).is_file()]
    if missing:
        raise DataError(f"{flat / missing[0]}: listed but missing ({len(missing)} of {len(pairs)} "
                        f"listed files missing); is this the right folder and list?")
    if out.resolve() == flat.resolve():
        raise DataError(f"{out}: is the flat folder itself; give a new folder, e.g. ROOT/val")
    done = Arranged()
    for synset in sorted({s for _, s in pairs}):
        (out / synset).mkdir(parents=True, exist_ok=True)
    for name, synset in pairs:
        _place(flat / name, out / synset / name, copy, done)
    listed = {f for f, _ in pairs}
    done.unlisted = sum(1 for e in os.scandir(flat) if is_image_file(e.name) and e.name not in listed)
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dawnbench_fast.data.imagenet.val_layout",
                                 description="File the flat ILSVRC-2012 validation images by synset.")
    ap.add_argument("list", help="file,synset lines (see the module's docstring or docs/IMAGENET.md)")
    ap.add_argument("flat_dir", help="the folder holding ILSVRC2012_val_*.JPEG")
    ap.add_argument("out_dir", help="the val folder to fill: OUT_DIR/<synset>/<file>")
    ap.add_argument("--copy", action="store_true", help="copy instead of hard-linking")
    args = ap.parse_args(argv)
    try:
        done = arrange(read_list(args.list), args.flat_dir, args.out_dir, copy=args.copy)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.out_dir}: {done.linked} linked, {done.copied} copied, {done.already} already in place"
          + (f"; {done.unlisted} images in {args.flat_dir} are not in the list" if done.unlisted else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
