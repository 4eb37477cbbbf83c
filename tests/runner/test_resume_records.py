"""A damaged run record met by ``--resume``: each record the
resumed command reads back (a finished seed's run.json, an interrupted
seed's checkpoint.pt, either's epochs.jsonl), cut short, emptied, not JSON,
not text, with a key missing or a value of another type, is one line naming
the file and what to do, exit status 2, with every file of the folder as it
was. It used to end in a traceback (a KeyError, a JSONDecodeError, a
TypeError deep in the report).

One real run of two tiny seeds (about 10 s) is copied for each case and one
of its files damaged; the resume is refused before the data is read (the
reader is a tripwire), except for a checkpoint whose model state does not
fit the model, which only loading it can tell (after the warm-up, before
any training or writing).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from support.cifar_data import cifar_dir

from dawnbench_fast import cifar
from dawnbench_fast.cifar import cli as cifar_cli
from dawnbench_fast.reporting.run_log import LOG_NAME
from dawnbench_fast.runner import runs
from dawnbench_fast.training.checkpoint import RUN_CHECKPOINT

TINY = ["--subset", "500", "--eval-subset", "200", "--epochs", "2", "--batch-size", "250", "--set",
        "widths=16,32,32", "--set", "whiten_images=500", "--latency-images", "5", "--no-progress",
        "--no-download", "--threads", "2", "--kernels", "torch", "--set", "precision=fp32", "--runs", "2"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """The folder of a finished command of two seeds (seed0/, seed1/), resumable as it is."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert cifar.main([*TINY, "--data-dir", str(cifar_dir()), "--out", str(out)]) == 0
    return out


# -- Damage: each takes the copied folder and returns the file it damaged ------------------------


def replaced(rel: str, data: bytes) -> Callable[[Path], Path]:
    def damage(out: Path) -> Path:
        (out / rel).write_bytes(data)
        return out / rel
    return damage


def cut(rel: str, keep: float = 0.5) -> Callable[[Path], Path]:
    def damage(out: Path) -> Path:
        raw = (out / rel).read_bytes()
        (out / rel).write_bytes(raw[: int(len(raw) * keep)])
        return out / rel
    return damage


def edited_json(rel: str, edit: Callable[[dict], None]) -> Callable[[Path], Path]:
    def damage(out: Path) -> Path:
        data = json.loads((out / rel).read_text())
        edit(data)
        (out / rel).write_text(json.dumps(data, indent=2))
        return out / rel
    return damage


def edited_log(edit: Callable[[list[dict]], list]) -> Callable[[Path], Path]:
    def damage(out: Path) -> Path:
        path = out / "seed0" / LOG_NAME
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(x) + "\n" for x in edit(lines)))
        return path
    return damage


def interrupted(edit: Callable[[dict], None] | None = None) -> Callable[[Path], Path]:
    """seed1 made an interrupted run (its run.json gone: it goes on from its
    checkpoint), the checkpoint's payload edited."""
    def damage(out: Path) -> Path:
        (out / "seed1" / "run.json").unlink()
        path = out / "seed1" / RUN_CHECKPOINT
        if edit is not None:
            payload = torch.load(path, map_location="cpu", weights_only=True)
            edit(payload)
            torch.save(payload, path)
        return path
    return damage


def then(*damages: Callable[[Path], Path]) -> Callable[[Path], Path]:
    """Several changes; the last names the damaged file."""
    def damage(out: Path) -> Path:
        return [d(out) for d in damages][-1]
    return damage


RUN = "seed0/run.json"


def _set(d: dict, dotted: str, value: object) -> None:
    *parents, key = dotted.split(".")
    for p in parents:
        d = d[p]
    d[key] = value


def _drop(d: dict, dotted: str) -> None:
    *parents, key = dotted.split(".")
    for p in parents:
        d = d[p]
    del d[key]


CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    # a finished seed's run.json
    "run-json-empty": (replaced(RUN, b""), "(empty)"),
    "run-json-truncated": (cut(RUN), "not JSON"),
    "run-json-not-json": (replaced(RUN, b"results: fine\n"), "not JSON: line 1"),
    "run-json-not-text": (replaced(RUN, b"\xff\xfe\x00{"), "not text"),
    "run-json-a-list": (replaced(RUN, b"[1, 2]\n"), "is not an object"),
    "run-json-no-result": (edited_json(RUN, lambda d: _drop(d, "result")), "no 'result'"),
    "run-json-result-a-string": (edited_json(RUN, lambda d: _set(d, "result", "done")),
                                 "'result' is \"done\""),
    "run-json-no-final-top1": (edited_json(RUN, lambda d: _drop(d, "result.final_top1")), "'final_top1'"),
    "run-json-top1-a-string": (edited_json(RUN, lambda d: _set(d, "result.final_top1", "94%")), "Error"),
    "run-json-seconds-a-string": (edited_json(RUN, lambda d: _set(d, "result.phases_seconds", {"init": "x"})),
                                  "Error"),
    "run-json-no-epochs": (edited_json(RUN, lambda d: _drop(d, "result.epochs")), "'epochs'"),
    "run-json-epoch-row-no-clock": (
        edited_json(RUN, lambda d: _drop(d["result"]["epochs"][-1], "clock_seconds")), "'clock_seconds'"),
    "run-json-no-command": (edited_json(RUN, lambda d: _drop(d, "command")), "'command'"),
    # its epochs.jsonl
    "log-cut-mid-line": (cut(f"seed0/{LOG_NAME}", 0.75), "is cut short"),
    "log-not-json": (replaced(f"seed0/{LOG_NAME}", b"epoch one\n"), "line 1 is not JSON"),
    "log-not-text": (replaced(f"seed0/{LOG_NAME}", b"\xff\xfe\n"), "not text"),
    "log-line-a-number": (edited_log(lambda lines: [5, *lines[1:]]), "line 1: 5 is not an object"),
    "log-epoch-a-string": (edited_log(lambda lines: [{**lines[0], "epoch": "1"}, *lines[1:]]),
                           "line 1: 'epoch' is \"1\", expected an integer"),
    "log-no-epoch": (edited_log(lambda lines: [{k: v for k, v in x.items() if k != "epoch"} for x in lines]),
                     "line 1: no 'epoch'"),
    "log-lr-a-string": (edited_log(lambda lines: [{**lines[0], "lr": {"filters": "high"}}, *lines[1:]]),
                        "line 1: lr: 'filters' is \"high\", expected a number"),
    # an interrupted seed's checkpoint
    "checkpoint-empty": (then(interrupted(), replaced(f"seed1/{RUN_CHECKPOINT}", b"")),
                         "torch cannot load it"),
    "checkpoint-truncated": (then(interrupted(), cut(f"seed1/{RUN_CHECKPOINT}")), "torch cannot load it"),
    "checkpoint-not-a-checkpoint": (then(interrupted(), replaced(f"seed1/{RUN_CHECKPOINT}", b"{}")),
                                    "torch cannot load it"),
    "checkpoint-no-loop": (interrupted(lambda p: p.pop("loop")), "no 'loop'"),
    "checkpoint-epochs-a-string": (interrupted(lambda p: p["loop"].update(epochs_done="2")),
                                   "loop: 'epochs_done' is \"2\", expected an integer"),
    "checkpoint-phase-a-string": (interrupted(lambda p: p["phases"].update(train="long")),
                                  "phases: 'train' is \"long\", expected a number"),
    "checkpoint-resumes-a-float": (interrupted(lambda p: p.update(resumes=1.5)), "'resumes' is 1.5"),
    "checkpoint-row-of-another-shape": (interrupted(lambda p: p["loop"]["rows"].append({"epoch": 3})),
                                        "TypeError"),
    # the log of an interrupted seed lacks an epoch its checkpoint holds
    "log-behind-its-checkpoint": (then(interrupted(), cut(f"seed1/{LOG_NAME}", 0.4)), "no line for epoch"),
}


def snapshot(folder: Path) -> list:
    return sorted((str(p.relative_to(folder)), p.is_file() and p.read_bytes()) for p in folder.rglob("*"))


def resume(out: Path, capsys) -> tuple[int, str]:
    code = cifar.main([*TINY, "--data-dir", str(cifar_dir()), "--resume", str(out)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("name", list(CASES))
def test_a_damaged_record_is_one_line_exit_2_and_the_folder_is_left_as_it_was(finished, tmp_path, capsys,
                                                                             monkeypatch, name):
    damage, needle = CASES[name]
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    path = damage(out)
    before = snapshot(out)

    def tripwire(*args, **kwargs):
        raise AssertionError("the data was read before the error")
    monkeypatch.setattr(cifar_cli, "load_cifar10", tripwire)
    code, err = resume(out, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"{cifar.PROG}: error: --resume: {path} "), lines[0]
    assert "damaged" in lines[0] and "new --out" in lines[0] and needle in lines[0], (needle, lines[0])
    assert snapshot(out) == before


def test_a_checkpoint_whose_model_does_not_fit_is_one_line_after_the_warm_up(finished, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(finished, out)

    def other_widths(payload: dict) -> None:
        model = payload["task"]["model"]
        name = next(k for k, v in model.items() if v.ndim == 4)  # a conv's filters, of another size
        model[name] = torch.zeros(3, *model[name].shape[1:])
    path = interrupted(other_widths)(out)
    before = snapshot(out)
    code, err = resume(out, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"{cifar.PROG}: error: --resume: {path} is damaged (RuntimeError: "), lines[0]
    assert snapshot(out) == before


def test_the_undamaged_records_resume_as_before(finished, tmp_path, capsys, monkeypatch):
    # the checks refuse only damage: the finished folder is read back, nothing trained again
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    monkeypatch.setattr(runs, "train", lambda *a, **k: pytest.fail("trained again"))
    code, err = resume(out, capsys)
    assert code == 0, err[-3000:]


def test_an_interrupted_seed_whose_last_log_line_a_kill_cut_goes_on(finished, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    interrupted()(out)
    with (out / "seed1" / LOG_NAME).open("a") as f:
        f.write('{"seed": 1, "epo')  # the kill cut the line being appended: dropped, as before
    code, err = resume(out, capsys)
    assert code == 0, err[-3000:]
    assert (out / "seed1" / "run.json").exists()
    assert (out / "seed1" / LOG_NAME).read_text().endswith("}\n")
