"""CIFAR-10 readers: the publisher's binary layout (``data_batch_1.bin`` ...)
and torchvision's pickle layout (``cifar-10-batches-py/data_batch_1`` ...).

Lookup order: ``--data-dir``, then ``$DAWNBENCH_DATA``, then the per-user
cache; if nothing is found the canonical binary archive is downloaded into the
cache and its MD5 checked (unless ``download=False``). Every failure is a
:class:`DataError` whose message is one line naming the file and the fix.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tarfile
import tempfile
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dawnbench_fast.hardware.machine import user_cache_dir

IMAGES_PER_FILE = 10_000
RECORD_BYTES = 1 + 32 * 32 * 3
BIN_FILE_BYTES = IMAGES_PER_FILE * RECORD_BYTES  # 30,730,000
TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_FILES = ["test_batch"]

# MD5s of the publisher's original files.
BIN_MD5 = {
    "data_batch_1.bin": "5dd7e06a14cb22eb9f671a540d1b7c25",
    "data_batch_2.bin": "5ea93a67294ea407fff1d09f752e9692",
    "data_batch_3.bin": "942cd6a4bcdd0dd3c604fbe906cb4421",
    "data_batch_4.bin": "ae636b3ba5c66a11e91e8cb52e771fcb",
    "data_batch_5.bin": "53f37980c15c3d472c316c40844f3f0d",
    "test_batch.bin": "803d5f7f4d78ea53de84dbe85f74fb6d",
}
PICKLE_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
}
# Which original a file is, by its MD5: a batch copied over another one (a
# training batch as test_batch) is named as such, not as a corrupt file.
ORIGINAL_OF = {md5: name for table in (BIN_MD5, PICKLE_MD5) for md5, name in
               ((v, k) for k, v in table.items())}
ARCHIVE_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
ARCHIVE_MD5 = "c32a1d4ab5d03f1284b67883e8d87530"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
# Per-channel statistics of the training set on the [0, 1] scale.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)

FIX = "point --data-dir (or $DAWNBENCH_DATA) at a complete copy of CIFAR-10"


class DataError(Exception):
    """A data problem, explained in one line that names the file and the fix."""


@dataclass
class Cifar10:
    """The whole dataset in memory as uint8 NHWC arrays."""

    train_images: np.ndarray  # (50000, 32, 32, 3) uint8
    train_labels: np.ndarray  # (50000,) int64
    test_images: np.ndarray  # (10000, 32, 32, 3) uint8
    test_labels: np.ndarray  # (10000,) int64
    root: Path
    layout: str  # "binary" or "pickle"
    verified: bool  # every file matched the original's MD5


def md5sum(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def cache_dir() -> Path:
    return user_cache_dir() / "cifar10"


def detect_layout(root: Path) -> tuple[Path, str] | None:
    """The folder holding the batch files and its layout, or None."""
    for cand in (root, root / "cifar-10-batches-bin", root / "cifar-10-batches-py"):
        if (cand / "data_batch_1.bin").exists():
            return cand, "binary"
        if (cand / "data_batch_1").exists():
            return cand, "pickle"
    return None


def _check_md5(path: Path, digest: str, want: str | None) -> bool:
    """Whether ``digest`` is the original's; a copy of another original is an error."""
    other = ORIGINAL_OF.get(digest)
    if other is not None and other.split(".")[0] != path.name.split(".")[0]:
        raise DataError(f"{path}: is a copy of {other} (its MD5), not {path.name}; {FIX}")
    return want is not None and digest == want


def _check_labels(path: Path, labels: np.ndarray) -> None:
    if labels.min() < 0 or labels.max() > 9:
        raise DataError(f"{path}: labels outside 0..9 (corrupt file or not CIFAR-10); {FIX}")


def _read_binary(path: Path, out: np.ndarray) -> tuple[np.ndarray, bool]:
    """Check one binary batch file and write its images into ``out``
    (10,000 x 32 x 32 x 3, NHWC); its labels, and True (its MD5 is checked:
    an original's or an error)."""
    if not path.is_file():
        what = "a folder, not a file" if path.is_dir() else "file missing"
        raise DataError(f"{path}: {what}; {FIX}")
    size = path.stat().st_size
    if size != BIN_FILE_BYTES:
        what = "empty" if size == 0 else f"{size} bytes, expected {BIN_FILE_BYTES}"
        raise DataError(f"{path}: {what} (truncated or not a CIFAR-10 batch); {FIX}")
    try:
        raw = np.fromfile(path, dtype=np.uint8).reshape(IMAGES_PER_FILE, RECORD_BYTES)
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror or e}); {FIX}") from e
    digest = hashlib.md5(raw).hexdigest()  # of the bytes already read: one pass over the file
    labels = raw[:, 0].astype(np.int64)
    # Structure first: random bytes get the more telling message than "MD5 mismatch".
    _check_labels(path, labels)
    if not _check_md5(path, digest, BIN_MD5.get(path.name)):
        raise DataError(f"{path}: MD5 mismatch (corrupt file); {FIX}")
    out[...] = raw[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return labels, True


def _batch_kind(label: object) -> str | None:
    """"test" or "train" from a pickle's batch_label (the originals say
    "testing batch 1 of 1" / "training batch 1 of 5"), None if it does not say."""
    if isinstance(label, bytes):
        label = label.decode("latin1")
    if not isinstance(label, str):
        return None
    if label.startswith(("testing", "test_batch")):
        return "test"
    return "train" if label.startswith(("training", "data_batch")) else None


def _read_pickle(path: Path, out: np.ndarray) -> tuple[np.ndarray, bool]:
    """Check one pickled batch file and write its images into ``out``; its
    labels, and whether its MD5 is the original's (torchvision's copies may differ)."""
    if not path.exists():
        raise DataError(f"{path}: file missing; {FIX}")
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f, encoding="latin1")
        data = np.asarray(entry["data"], dtype=np.uint8)
        labels = np.asarray(entry.get("labels", entry.get("fine_labels")), dtype=np.int64)
        kind = _batch_kind(entry.get("batch_label"))
    except Exception as e:  # unpickling errors come in many types
        raise DataError(f"{path}: truncated or corrupt pickle ({type(e).__name__}); {FIX}") from e
    if data.shape != (IMAGES_PER_FILE, 3072) or labels.shape != (IMAGES_PER_FILE,):
        raise DataError(f"{path}: unexpected contents {data.shape}/{labels.shape}; {FIX}")
    _check_labels(path, labels)
    expected = "test" if path.name in TEST_FILES else "train"
    if kind is not None and kind != expected:
        raise DataError(f"{path}: holds a {kind}ing batch (batch_label {entry['batch_label']!r}), "
                        f"not a {expected}ing batch; {FIX}")
    verified = _check_md5(path, md5sum(path), PICKLE_MD5.get(path.name))
    out[...] = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return labels, verified


def _check_distinct(folder: Path, parts: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """No batch repeats another (e.g. a training batch copied over test_batch,
    which would make the test accuracy a training accuracy). Files that are
    not the originals pass every other check, so compare contents: the first
    images of each batch are enough to tell the ten-thousand-image batches apart."""
    seen: dict[str, str] = {}
    for name, (images, _) in parts.items():
        digest = hashlib.md5(np.ascontiguousarray(images[:256]).tobytes()).hexdigest()
        if digest in seen:
            raise DataError(f"{folder / name}: holds the same images as {seen[digest]} "
                            f"(a batch copied over another?); {FIX}")
        seen[digest] = name


def read_cifar10(folder: Path, layout: str) -> Cifar10:
    """Read and check every batch file of one layout in ``folder``.

    The files are read side by side (a thread each, up to the core count:
    reading, hashing and the NCHW -> NHWC copy release the GIL) straight into
    the dataset's arrays, with no concatenation after: at a trainer's start-up
    this halves the read on two cores. A bad file is reported as it would be
    read one at a time, the first in file order."""
    shape = (IMAGES_PER_FILE, 32, 32, 3)
    train = np.empty((len(TRAIN_FILES) * IMAGES_PER_FILE, *shape[1:]), dtype=np.uint8)
    test = np.empty(shape, dtype=np.uint8)
    images = {name: train[i * IMAGES_PER_FILE:(i + 1) * IMAGES_PER_FILE]
              for i, name in enumerate(TRAIN_FILES)} | {TEST_FILES[0]: test}
    binary = layout == "binary"

    def read(name: str) -> tuple[np.ndarray, bool]:  # (labels, MD5 the original's)
        path = folder / (f"{name}.bin" if binary else name)
        return (_read_binary if binary else _read_pickle)(path, images[name])

    with ThreadPoolExecutor(max_workers=min(len(images), os.cpu_count() or 1)) as pool:
        futures = {name: pool.submit(read, name) for name in images}
        files = {name: f.result() for name, f in futures.items()}  # raised in file order
    _check_distinct(folder, {name: (images[name], files[name][0]) for name in images})
    return Cifar10(
        train_images=train,
        train_labels=np.concatenate([files[n][0] for n in TRAIN_FILES]),
        test_images=test,
        test_labels=files[TEST_FILES[0]][0],
        root=folder,
        layout=layout,
        verified=all(ok for _, ok in files.values()),
    )


def download(dest: Path, url: str = ARCHIVE_URL, timeout: float = 30.0) -> Path:
    """Fetch the canonical binary archive into ``dest``, check its MD5 and
    unpack it atomically. Returns the folder that holds the batch files."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        archive = Path(tmp) / "cifar-10-binary.tar.gz"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r, open(archive, "wb") as f:
                while block := r.read(1 << 20):
                    f.write(block)
        except OSError as e:
            raise DataError(
                f"CIFAR-10 not found locally and the download from {url} failed ({e}); {FIX}"
            ) from e
        if md5sum(archive) != ARCHIVE_MD5:
            raise DataError(f"{url}: downloaded archive has a wrong MD5; retry, or {FIX}")
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        final = dest / "cifar-10-batches-bin"
        os.replace(Path(tmp) / "cifar-10-batches-bin", final)
    return final


def _found_instead(root: Path, show: int = 3) -> str:
    """What a folder without batch files holds, for the error message."""
    names = sorted(p.name for p in root.iterdir())
    if not names:
        return "it is empty"
    more = f" and {len(names) - show} more" if len(names) > show else ""
    return f"found {', '.join(names[:show])}{more}"


def locate(data_dir: str | os.PathLike | None, allow_download: bool = True) -> tuple[Path, str]:
    """Find CIFAR-10: --data-dir, then $DAWNBENCH_DATA, then the cache;
    download into the cache as a last resort."""
    if data_dir is not None:
        root = Path(data_dir)
        if not root.is_dir():
            what = "is a file, not a folder" if root.exists() else "no such folder"
            raise DataError(f"--data-dir {data_dir}: {what}; point it at a folder holding CIFAR-10")
        found = detect_layout(root)
        if found is None:
            raise DataError(
                f"--data-dir {data_dir}: no CIFAR-10 batch files there ({_found_instead(root)}; "
                "expected data_batch_1.bin or cifar-10-batches-py/data_batch_1); "
                "point it at a complete copy"
            )
        return found
    env = os.environ.get("DAWNBENCH_DATA")
    if env:
        found = detect_layout(Path(env))
        if found is None:
            raise DataError(
                f"$DAWNBENCH_DATA={env}: no CIFAR-10 batch files there; fix or unset it"
            )
        return found
    found = detect_layout(cache_dir())
    if found is not None:
        return found
    if not allow_download:
        raise DataError(
            f"CIFAR-10 not found (no --data-dir, no $DAWNBENCH_DATA, nothing in {cache_dir()}) "
            "and --no-download is set; pass --data-dir DIR"
        )
    return download(cache_dir()), "binary"


def subset_problem(ds: Cifar10, subset: int, eval_subset: int) -> str | None:
    """Why the first ``subset`` training and ``eval_subset`` test images cannot
    be taken from ``ds`` (one line naming the flag and the fix), or None."""
    for flag, k, have, what in (("--subset", subset, len(ds.train_images), "training"),
                                ("--eval-subset", eval_subset, len(ds.test_images), "test")):
        if k > have:
            return f"{flag} {k}: larger than the dataset ({have} {what} images); pass at most {have}"
    return None


def fit_problem(ds: Cifar10, cfg: Any) -> str | None:
    """Why the recipe ``cfg`` asks more of the training images it takes from
    ``ds`` (the first ``cfg.subset``, 0 = all) than they hold (one line naming
    the flag and the fix), or None: a batch larger than them (it would be cut
    to their number), a whitening sample larger than them (it would take what
    there is), a progressive crop larger than an image (it would train on the
    whole image). Refused rather than changed, so that a run is what its
    config says it is (the CLI takes a recipe's own batch and whitening
    sample down to a smaller --subset beforehand, and says so:
    dawnbench_fast.cifar.recipe.fit_subset); the subsets themselves are
    :func:`subset_problem`'s."""
    if (problem := subset_problem(ds, cfg.subset, cfg.eval_subset)) is not None:
        return problem
    n = cfg.subset or len(ds.train_images)
    images = f"the {n} training images" + (" of --subset" if cfg.subset else "")
    more = " (or a larger --subset)" if cfg.subset else ""
    if cfg.batch_size > n:
        return f"--batch-size {cfg.batch_size}: larger than {images}; pass at most {n}{more}"
    if cfg.whiten_images > n:
        return (f"--set whiten_images={cfg.whiten_images}: more than {images}; pass at most "
                f"--set whiten_images={n}{more}")
    side = ds.train_images.shape[1]
    if any(s > side for s in cfg.progressive):
        return (f"--set progressive={','.join(map(str, cfg.progressive))}: a crop larger than the "
                f"{side}-px images; pass sides of at most {side}")
    return None


def load_cifar10(data_dir: str | os.PathLike | None = None, allow_download: bool = True) -> Cifar10:
    folder, layout = locate(data_dir, allow_download)
    return read_cifar10(folder, layout)


def synthetic_cifar10(seed: int = 0) -> Cifar10:
    """Random uint8 images and labels in CIFAR-10's shapes (50,000 training
    and 10,000 test images, 32x32x3), seeded, no file read. For a compile
    warm-up before the real data has arrived: torch.compile's and Triton's
    on-disk caches are keyed by shapes and dtypes, never by the values, so a
    warm-up on these fills them for the real run. Never for training."""
    rng = np.random.default_rng(seed)
    side = 32

    def images(n: int) -> np.ndarray:
        return rng.integers(0, 256, size=(n, side, side, 3), dtype=np.uint8)

    def labels(n: int) -> np.ndarray:
        return rng.integers(0, len(CLASSES), size=n, dtype=np.int64)

    train_n, test_n = IMAGES_PER_FILE * len(TRAIN_FILES), IMAGES_PER_FILE * len(TEST_FILES)
    return Cifar10(images(train_n), labels(train_n), images(test_n), labels(test_n),
                   root=Path("synthetic"), layout="synthetic", verified=False)
