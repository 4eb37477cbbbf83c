"""Bad input, case by case, through the real command line.

Every case runs ``dawnbench_fast.cifar.main`` (in-process: no interpreter
start-up) and must end with exit status 2 and one line on stderr naming the
flag or file and what to do, never a traceback, and must leave ``--out`` as
it found it (nothing created, no temp files). Errors must come early: a bad
flag before any data is read, a bad file before any model is built; the
readers and the trainer are replaced by tripwires to prove it (and so that a
missing check fails in a second instead of training).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from support.cifar_data import cifar_dir

from dawnbench_fast import atomic, cifar
from dawnbench_fast.cifar import cli as cifar_cli
from dawnbench_fast.cifar import task as cifar_task
from dawnbench_fast.cifar import train_state as cifar_train_state
from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.data import cifar10 as C
from dawnbench_fast.runner import cli
from dawnbench_fast.training import checkpoint

# A tiny run, so that a check that is missing costs seconds, not a training.
BASE = ["--no-download", "--no-progress", "--kernels", "torch", "--epochs", "1", "--subset", "1000",
        "--set", "whiten_images=1000", "--batch-size", "500", "--eval-subset", "200", "--latency-images", "0"]


# -- Damaged copies of the data (symlinks to the shared files, one replaced) --


def linked_copy(tmp: Path, replace: dict[str, bytes] | None = None) -> Path:
    d = tmp / "c10"
    d.mkdir()
    for f in cifar_dir().iterdir():
        if f.name in (replace or {}):
            (d / f.name).write_bytes(replace[f.name])
        else:
            os.symlink(f, d / f.name)
    return d


def replaced(name: str, contents: Callable[[], bytes]) -> Callable[[Path], Path]:
    """A copy of the data whose file ``name`` holds ``contents()``."""
    return lambda tmp: linked_copy(tmp, {name: contents()})


def original(name: str) -> bytes:
    return (cifar_dir() / name).read_bytes()


def flipped_byte(name: str, at: int = 12345) -> bytes:
    raw = bytearray(original(name))
    raw[at] ^= 0xFF
    return bytes(raw)


def random_bytes(n: int = C.BIN_FILE_BYTES) -> bytes:
    return np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8).tobytes()


def without_batch_5(tmp: Path) -> Path:
    d = linked_copy(tmp)
    (d / "data_batch_5.bin").unlink()
    return d


def other_files(tmp: Path) -> Path:
    d = tmp / "downloads"
    d.mkdir()
    for name in ("README.txt", "cifar-10-binary.tar.gz", "notes.md", "photo.png"):
        (d / name).write_bytes(b"not cifar")
    return d


def a_file(tmp: Path) -> Path:
    (tmp / "file").write_text("x")
    return tmp / "file"


@pytest.fixture(scope="module")
def pickled(tmp_path_factory) -> Path:
    """The five training batches in torchvision's pickle layout, with their
    original batch labels, written once for the pickle cases."""
    folder = tmp_path_factory.mktemp("pickled")
    for i, name in enumerate(C.TRAIN_FILES, 1):
        raw = np.fromfile(cifar_dir() / f"{name}.bin", dtype=np.uint8).reshape(-1, C.RECORD_BYTES)
        entry = {"batch_label": f"training batch {i} of 5", "labels": raw[:, 0].tolist(),
                 "data": raw[:, 1:].copy()}
        with open(folder / name, "wb") as f:
            pickle.dump(entry, f)
    return folder


def pickle_test_batch(batch_label: str) -> Callable[[Path, Path], Path]:
    """A pickle layout whose test_batch is data_batch_1 under ``batch_label``."""
    def make(tmp: Path, pickled: Path) -> Path:
        d = tmp / "cifar-10-batches-py"
        d.mkdir()
        for name in C.TRAIN_FILES:
            os.symlink(pickled / name, d / name)
        with open(pickled / "data_batch_1", "rb") as f:
            entry = pickle.load(f)
        entry["batch_label"] = batch_label
        with open(d / "test_batch", "wb") as f:
            pickle.dump(entry, f)
        return tmp
    return make


# -- What --out looks like before the run -----------------------------------


def out_new(tmp: Path) -> Path:
    return tmp / "out"


def out_empty(tmp: Path) -> Path:
    (tmp / "out").mkdir(parents=True)
    return tmp / "out"


def out_file(tmp: Path) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "out").write_text("my notes")
    return tmp / "out"


def out_nonempty(tmp: Path) -> Path:
    (tmp / "out").mkdir(parents=True)
    (tmp / "out" / "earlier_run.tsv").write_text("epoch\thours\ttop1Accuracy\n1\t0.1\t94.1\n")
    return tmp / "out"


def out_under_file(tmp: Path) -> Path:
    return a_file(tmp) / "out"


def saved_seed_model(tmp: Path) -> Path:
    """m.pt, whose --runs 2 files would be m_seed0.pt and m_seed1.pt; the second exists."""
    (tmp / "m_seed1.pt").write_bytes(b"weights")
    return tmp / "m.pt"


def run_folder(change: dict | None = None, truncate: bool = False) -> Callable[[Path], Path]:
    """An --out folder holding the checkpoint of an interrupted run of the
    case's own command (``change``: fields that differ; ``truncate``: cut)."""
    def make(tmp: Path) -> Path:
        out = tmp / "out"
        args = cifar.build_parser().parse_args([*BASE, "--data-dir", str(cifar_dir()), "--out", str(out)])
        config = dataclasses.asdict(dataclasses.replace(cifar.config_from_args(args), **(change or {})))
        checkpoint.save_run(out / checkpoint.RUN_CHECKPOINT, config=config, task_state={},
                            loop={"rows": [], "tta_seconds": None, "tta_epoch": None, "epochs_done": 0},
                            phases={}, wall_start=0.0, resumes=0)
        if truncate:
            raw = (out / checkpoint.RUN_CHECKPOINT).read_bytes()
            (out / checkpoint.RUN_CHECKPOINT).write_bytes(raw[: len(raw) // 2])
        return out
    return make


def resume_own_out(tmp: Path) -> list[str]:
    return ["--resume", str(tmp / "out")]


def snapshot(path: Path) -> object:
    """Everything at ``path`` (names and bytes), to compare before and after."""
    if not path.exists():
        return None
    if path.is_file():
        return path.read_bytes()
    return sorted((str(p.relative_to(path)), p.is_file() and p.read_bytes()) for p in path.rglob("*"))


# -- The matrix ----------------------------------------------------------------


@dataclass
class Case:
    args: list[str]
    needles: tuple[str, ...]  # in the error line: the flag or file, what is wrong, what to do
    data: Callable[..., Path] | None = None  # (tmp[, pickled]) -> --data-dir; None: the real copy
    out: Callable[[Path], Path] = out_new
    stage: str = "flags"  # flags: fails before any data is read; data: before any model exists
    more: Callable[[Path], list[str]] = lambda tmp: []  # flags naming files made in tmp


def data_case(data: Callable[..., Path], *needles: str, out: Callable[[Path], Path] = out_new) -> Case:
    return Case([], needles, data, out, "data")


CASES = {
    # flags, checked before anything is read
    "target-0": Case(["--target", "0"], ("--target 0.0", "must be in (0, 1]")),
    "target-1.5": Case(["--target", "1.5"], ("--target 1.5", "0.94 means 94%")),
    "target-nan": Case(["--target", "nan"], ("--target: nan", "must be a finite number")),
    "batch-size-0": Case(["--batch-size", "0"], ("--batch-size 0", "must be >= 1")),
    "epochs-0": Case(["--epochs", "0"], ("--epochs 0", "must be > 0")),
    "epochs-not-number": Case(["--epochs", "x"], ("--epochs", "expected a number", "--help")),
    "subset-negative": Case(["--subset", "-1"], ("--subset -1", "must be >= 0")),
    "cost-negative": Case(["--cost-per-hour", "-1"], ("--cost-per-hour -1.0", "must be a price >= 0")),
    "cost-nan": Case(["--cost-per-hour", "nan"], ("--cost-per-hour: nan", "must be a finite number")),
    "threads-negative": Case(["--threads", "-1"], ("--threads -1", "must be >= 0")),
    "eval-every-negative": Case(["--eval-every", "-1"], ("--eval-every -1", "must be >= 0")),
    "seed-negative": Case(["--seed", "-1"], ("--seed -1", "must be >= 0")),
    "runs-0": Case(["--runs", "0"], ("--runs 0", "must be >= 1")),
    "set-unknown-field": Case(["--set", "nope=1"], ("--set nope", "unknown field", "known:", "lr_filters")),
    "set-bad-value": Case(["--set", "lr_filters=abc"], ("--set lr_filters=abc", "expected float")),
    "set-bad-bool": Case(["--set", "flip=maybe"], ("--set flip=maybe", "expected true or false")),
    "set-out-of-range": Case(["--set", "tta_level=7"], ("--set tta_level=7", "must be 0, 1 or 2")),
    "set-no-equals": Case(["--set", "epochs"], ("--set epochs", "expected name=value")),
    "set-bad-conv-wgrad": Case(["--set", "conv_wgrad=fast"],
                               ("conv_wgrad", "must be env or one of", "dpbf16")),
    "set-bad-conv-dgrad": Case(["--set", "conv_dgrad=fast"],
                               ("conv_dgrad", "must be env or one of", "pooled")),
    "set-bad-first-conv": Case(["--set", "first_conv=pca"],
                               ("first_conv", "must be whitened, learned, random")),
    "set-bad-filter-optimizer": Case(["--set", "filter_optimizer=adam"],
                                     ("filter_optimizer", "must be muon or sgd")),
    "set-lr-filters-sgd-0": Case(["--set", "lr_filters_sgd=0"], ("lr_filters_sgd", "must be > 0")),
    # non-finite numbers: float() reads them, the range checks alone let some through
    "set-nan": Case(["--set", "lr_filters=nan"], ("--set lr_filters=nan", "must be a finite number")),
    "set-inf": Case(["--set", "label_smoothing=inf"], ("--set label_smoothing=inf", "finite")),
    "set-minus-inf": Case(["--set", "weight_decay=-inf"], ("--set weight_decay=-inf", "finite")),
    "epochs-inf": Case(["--epochs", "inf"], ("--epochs: inf", "must be a finite number")),
    "config-file-nan": Case([], ("--config", "field lr_head=nan", "must be a finite number"),
                            more=lambda t: ["--config", str(config_json(t, '{"lr_head": NaN}'))]),
    "config-file-infinity": Case([], ("--config", "field brightness=inf", "finite"),
                                 more=lambda t: ["--config", str(config_json(t, '{"brightness": 1e999}'))]),
    # slices the data would take as given: none, or all but the last N
    "set-whiten-images-negative": Case(["--set", "whiten_images=-5"], ("--set whiten_images=-5", ">= 1")),
    "set-eval-batch-size-0": Case(["--set", "eval_batch_size=0"], ("--set eval_batch_size=0", ">= 1")),
    "set-progressive-too-small": Case(["--set", "progressive=4"], ("progressive", "at least", "9 px")),
    "set-progressive-mode-unknown": Case(["--set", "progressive_mode=resize"],
                                         ("progressive_mode", "crop or downsample")),
    "set-lr-hold-the-whole-run": Case(["--set", "lr_hold_epochs=20"],
                                      ("--epochs 1", "lr_hold_epochs = 20", "--set lr_hold_epochs=0")),
    "set-lr-floor-1": Case(["--set", "lr_floor=1"], ("lr_floor", "[0, 1)")),
    "out-is-a-file": Case([], ("--out", "is a file", "folder path"), out=out_file),
    "out-under-a-file": Case([], ("--out", "file", "is a file"), out=out_under_file),
    "out-not-empty": Case([], ("--out", "not empty", "new --out folder", "--overwrite"), out=out_nonempty),
    "save-model-is-a-folder": Case([], ("--save-model", "is a folder", "model.pt"),
                                   more=lambda t: ["--save-model", str(out_empty(t / "models"))]),
    "save-model-exists": Case([], ("--save-model", "exists", "--overwrite"),
                              more=lambda t: ["--save-model", str(a_file(t))]),
    "save-model-seed-exists": Case(["--runs", "2"], ("--save-model", "m_seed1.pt exists", "--overwrite"),
                                   more=lambda t: ["--save-model", str(saved_seed_model(t))]),
    "save-model-under-a-file": Case([], ("--save-model", "is a file", "file path"),
                                    more=lambda t: ["--save-model", str(a_file(t) / "m.pt")]),
    "resume-missing-folder": Case([], ("--resume", "no such run folder"), more=resume_own_out),
    "resume-with-another-out": Case([], ("--resume", "--out", "its own folder", "drop --out"),
                                    more=lambda t: ["--resume", str(out_nonempty(t / "r"))]),
    "resume-without-checkpoint": Case([], ("--resume", "no checkpoint there", "start it again"),
                                      out=out_nonempty, more=resume_own_out),
    # data, checked before any model is built
    "resume-another-config": Case([], ("--resume", "checkpoint of another config", "lr_filters=0.3 there",
                                       "resume with the command that started it"),
                                  out=run_folder({"lr_filters": 0.3}), more=resume_own_out, stage="data"),
    "resume-truncated-checkpoint": Case([], ("--resume", "checkpoint.pt is damaged", "new --out"),
                                        out=run_folder(truncate=True), more=resume_own_out, stage="data"),
    "data-dir-missing": data_case(lambda t: t / "nope", "--data-dir", "no such folder", "point it at"),
    "data-dir-is-a-file": data_case(a_file, "--data-dir", "is a file", "point it at"),
    "data-dir-wrong-layout": data_case(other_files, "--data-dir", "no CIFAR-10 batch files",
                                       "found README.txt", "and 1 more", "point it at a complete copy"),
    "batch-missing": data_case(without_batch_5, "data_batch_5.bin", "file missing", "--data-dir"),
    "batch-empty": data_case(replaced("data_batch_2.bin", lambda: b""),
                             "data_batch_2.bin", "empty", "--data-dir"),
    "batch-truncated": data_case(replaced("test_batch.bin", lambda: original("test_batch.bin")[:-3073]),
                                 "test_batch.bin", "30726927 bytes, expected 30730000", "truncated",
                                 "--data-dir"),
    "batch-flipped-byte": data_case(replaced("data_batch_3.bin", lambda: flipped_byte("data_batch_3.bin")),
                                    "data_batch_3.bin", "MD5 mismatch", "--data-dir"),
    "batch-random-bytes": data_case(replaced("data_batch_4.bin", random_bytes),
                                    "data_batch_4.bin", "labels outside 0..9", "--data-dir"),
    # An existing empty --out is fine: the error is the data's.
    "test-is-train-binary": data_case(replaced("test_batch.bin", lambda: original("data_batch_1.bin")),
                                      "test_batch.bin", "copy of data_batch_1.bin", "--data-dir",
                                      out=out_empty),
    "test-is-train-pickle-label": data_case(pickle_test_batch("training batch 1 of 5"), "test_batch",
                                            "holds a training batch", "--data-dir"),
    "test-is-train-pickle-content": data_case(pickle_test_batch("testing batch 1 of 1"), "test_batch",
                                              "same images as data_batch_1", "--data-dir"),
    # after the data is read (its size is the data's), before any model
    "subset-larger-than-dataset": Case(["--subset", "60000"], ("--subset 60000", "larger than the dataset",
                                                               "at most 50000"), stage="data"),
    "eval-subset-larger-than-dataset": Case(["--eval-subset", "10001"], ("--eval-subset 10001",
                                                                         "at most 10000"), stage="data"),
    # what the (sub)set cannot honour: refused, never cut to fit
    "batch-size-larger-than-subset": Case(["--batch-size", "1001"], (
        "--batch-size 1001", "larger than the 1000 training images of --subset", "pass at most 1000"),
        stage="data"),
    "whiten-images-larger-than-subset": Case(["--set", "whiten_images=1500"], (
        "--set whiten_images=1500", "more than the 1000 training images", "whiten_images=1000"),
        stage="data"),
    "batch-size-larger-than-dataset": Case(["--subset", "0", "--batch-size", "50001"], (
        "--batch-size 50001", "larger than the 50000 training images;", "at most 50000"), stage="data"),
    "progressive-larger-than-images": Case(["--set", "progressive=40,24"], (
        "--set progressive=40,24", "larger than the 32-px images", "at most 32"), stage="data"),
}


def config_json(tmp: Path, text: str) -> Path:
    """A --config file holding ``text`` (JSON as Python's json module reads it: NaN, 1e999)."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "config.json").write_text(text)
    return tmp / "config.json"


def tripwire(what: str) -> Callable[..., None]:
    def fail(*args, **kwargs):
        raise AssertionError(f"{what} before the error")
    return fail


def run_main(args: list[str], capsys) -> tuple[int, str]:
    try:
        code = cifar.main(args)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    return code, capsys.readouterr().err


def check_one_line_error(code: int, err: str, needles: tuple[str, ...]) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{cifar.PROG}: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(name, tmp_path, capsys, monkeypatch, request):
    case = CASES[name]
    # Found before $DAWNBENCH_DATA goes (the run must read only --data-dir), and
    # kept for the helpers that copy it: the checkout may have no shared/ beside it.
    data = cifar_dir()
    monkeypatch.setattr(sys.modules[__name__], "cifar_dir", lambda: data)
    monkeypatch.delenv("DAWNBENCH_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # never the user's cache
    if case.data is not None:
        pickles = case.data.__code__.co_argcount == 2  # built once, only for the cases that use them
        data = case.data(tmp_path, request.getfixturevalue("pickled")) if pickles else case.data(tmp_path)
    out = case.out(tmp_path)
    before = snapshot(out)
    if case.stage == "flags":
        monkeypatch.setattr(cifar_cli, "load_cifar10", tripwire("the data was read"))
    monkeypatch.setattr(cifar_cli, "CifarTask", tripwire("a model was built"))
    monkeypatch.setattr(cifar_task, "CifarTask", tripwire("a model was built"))  # the command's shared_tasks
    monkeypatch.setattr(cifar_train_state, "build_model", tripwire("a model was built"))
    code, err = run_main([*BASE, "--data-dir", str(data), "--out", str(out), *case.args,
                          *case.more(tmp_path)], capsys)
    check_one_line_error(code, err, case.needles)
    assert snapshot(out) == before


# -- The --out policy ------------------------------------------------------------


def test_out_policy_in_one_place(tmp_path):
    cli.check_out_dir(tmp_path / "new" / "deeper", overwrite=False)  # created at the first write
    assert not (tmp_path / "new").exists()
    cli.check_out_dir(out_empty(tmp_path / "a"), overwrite=False)
    full = out_nonempty(tmp_path / "b")
    with pytest.raises(ConfigError, match="--overwrite"):
        cli.check_out_dir(full, overwrite=False)
    cli.check_out_dir(full, overwrite=True)
    cli.check_out_dir(full, overwrite=False, resuming=True)  # --resume reuses its own folder
    with pytest.raises(ConfigError, match="is a file"):
        cli.check_out_dir(out_file(tmp_path / "c"), overwrite=True)  # even with --overwrite


def test_overwrite_lets_a_run_into_a_non_empty_out(tmp_path, capsys):
    out = out_nonempty(tmp_path)
    # The out check passes, so the next check speaks: the epochs, not the folder.
    code, err = run_main([*BASE, "--data-dir", str(cifar_dir()), "--out", str(out), "--overwrite",
                          "--epochs", "0"], capsys)
    check_one_line_error(code, err, ("--epochs 0",))
    code, err = run_main([*BASE, "--data-dir", str(cifar_dir()), "--out", str(out), "--overwrite",
                          "--save-model", str(a_file(tmp_path)), "--epochs", "0"], capsys)
    check_one_line_error(code, err, ("--epochs 0",))  # and over a saved model


def test_show_config_ignores_out(tmp_path, capsys):
    code = cifar.main(["--show-config", "--out", str(out_nonempty(tmp_path))])
    assert code == 0 and '"epochs"' in capsys.readouterr().out


def test_a_run_that_fails_writes_nothing(tmp_path, capsys, monkeypatch):
    """A failure that is no user error (here: in the trainer) propagates, and
    --out is still not created: nothing is written before there are results."""
    monkeypatch.setattr(cifar_task, "CifarTask", tripwire("crash"))  # the command's tasks (shared_tasks)
    out = out_new(tmp_path)
    with pytest.raises(AssertionError, match="crash"):
        cifar.main([*BASE, "--data-dir", str(cifar_dir()), "--out", str(out)])
    assert not out.exists()


def test_a_failed_write_leaves_no_temp_file(tmp_path):
    out = out_empty(tmp_path)
    with pytest.raises(RuntimeError), atomic.atomic_path(out / "run.json") as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert list(out.iterdir()) == []


def test_non_empty_out_from_the_shell(tmp_path):
    """The user's view: the process exits 2 with one line that says the fix."""
    out = out_nonempty(tmp_path)
    r = subprocess.run([sys.executable, "-m", "dawnbench_fast.cifar", *BASE, "--data-dir", str(cifar_dir()),
                        "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "--overwrite" in r.stderr
    assert r.stdout == "" and snapshot(out) == [("earlier_run.tsv", (out / "earlier_run.tsv").read_bytes())]
