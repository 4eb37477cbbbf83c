"""``--kernels auto`` on a GPU from the measured winners table
(dawnbench_fast/kernel_winners.py): the winner rule on suite records (eager
medians) and on an in-step result (the captured step), and a
stand-in table driving dispatch on a GPU model it lists, one it does not,
and a winner that cannot run here. No GPU needed: the GPU's name and the
backends' probes are stood in for."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from dawnbench_fast import dispatch, kernel_winners

GPU = "Stand-in GPU 80GB"


def _case(op, case, impl, ms, err=0.0, status="ok"):
    return {"op": op, "case": case, "impl": impl, "median_ms": ms, "rel_err_vs_torch": err, "status": status}


def test_the_winner_is_the_fastest_face_that_ran_every_case_and_agreed():
    cases = [_case("bn_act", "a", "torch", 1.0), _case("bn_act", "b", "torch", 2.0),
             _case("bn_act", "a", "torch.compile[inductor]", 0.5),
             _case("bn_act", "b", "torch.compile[inductor]", 0.5),
             _case("bn_act", "a", "triton", 0.4), _case("bn_act", "b", "triton", 2.4),   # 2.8 > 2.5
             _case("bn_act", "a", "cuda", 0.9), _case("bn_act", "b", "cuda", 1.6)]     # 2.5 < 3.0
    row = kernel_winners.op_winner(cases)
    assert row["winner"] == "cuda"
    assert row["total_ms"] == pytest.approx({"torch": 3.0, "triton": 2.8, "cuda": 2.5})
    assert row["torch_compile_total_ms"] == pytest.approx(1.0) and row["cases"] == 2
    assert "cuda 2.5 ms over 2 case(s) against torch 3 ms, triton 2.8 ms" == row["why"]
    # a face that failed a case, or disagreed with torch, is never the winner
    cases[-1] = _case("bn_act", "b", "cuda", None, status="error")
    cases[4] = _case("bn_act", "a", "triton", 0.1, err=0.3)
    row = kernel_winners.op_winner(cases)
    assert row["winner"] == "torch" and set(row["rejected"]) == {"triton", "cuda"}
    assert "1 of 2 cases did not run" in row["rejected"]["cuda"] and "error 0.3" in row["rejected"]["triton"]


def test_a_tie_keeps_torch_and_no_torch_time_means_torch():
    tie = [_case("augment", "a", "torch", 1.0), _case("augment", "a", "triton", 1.0)]
    assert kernel_winners.op_winner(tie)["winner"] == "torch"
    no_ref = [_case("augment", "a", "torch", None, status="error"), _case("augment", "a", "triton", 0.5)]
    assert kernel_winners.op_winner(no_ref)["winner"] == "torch"


def _suite(gpu=GPU) -> dict:
    cases = [_case("augment", "aug", "torch", 0.46), _case("augment", "aug", "triton", 0.34),
             _case("augment", "aug", "cuda", 0.37), _case("bn_act", "bn", "torch", 1.0),
             _case("bn_act", "bn", "triton", 4.6), _case("bn_act", "bn", "cuda", 3.1)]
    return {"environment": {"gpu": {"name": gpu}, "recorded": "2026-11-25T01:02:03Z", "git": "abc1234",
                            "torch": "2.11.0", "triton": "3.6.0"},
            "parts": {"ops": {"cases": cases}}}


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A winners table written from a stand-in suite, installed as the
    committed one; this machine's 'GPU' is GPU and every backend runs."""
    gpu, table = kernel_winners.updated_table({"schema_version": 1, "gpus": {}}, _suite())
    assert gpu == GPU
    path = tmp_path / "kernel_winners.json"
    kernel_winners.write_table(table, path)
    monkeypatch.setattr(kernel_winners, "TABLE_PATH", path)
    monkeypatch.setattr(kernel_winners, "gpu_name", lambda device: GPU)
    real = dispatch.unavailable_reason
    monkeypatch.setattr(dispatch, "unavailable_reason",
                        lambda b, d: None if b in ("triton", "cuda") else real(b, d))
    return table


def test_auto_takes_the_tables_winner_on_a_listed_gpu(stand_in):
    backend = dispatch.resolve_backend("auto", "cuda")
    assert isinstance(backend, dispatch.PerOpBackend) and backend == "per-op"
    assert backend.choices["augment"] == "triton" and backend.choices["bn_act"] == "torch"
    assert backend.choices["conv_group"] == "torch"  # not measured: the reference
    assert dispatch.get_op("augment", backend) is dispatch.get_op("augment", "triton")
    assert dispatch.get_op("bn_act", backend) is dispatch.reference("bn_act")
    table = dispatch.op_table(backend)  # what run.json records: which, and why
    assert table["augment"]["backend"] == "triton" and table["bn_act"]["backend"] == "torch"
    assert table["augment"]["why"].startswith(f"eager medians measured on {GPU} 2026-11-25: triton 0.34 ms")
    assert "in_step" not in table["augment"]  # an eager row has no in-step figures
    assert "conv_group was not measured" in table["conv_group"]["why"]
    json.dumps(table)
    again = pickle.loads(pickle.dumps(backend))
    assert again == "per-op" and again.choices == backend.choices


def test_auto_serves_torch_on_a_gpu_the_table_does_not_list(stand_in, monkeypatch):
    monkeypatch.setattr(kernel_winners, "gpu_name", lambda device: "Some Other GPU")
    backend = dispatch.resolve_backend("auto", "cuda")
    assert backend == "torch" and set(backend.choices.values()) == {"torch"}
    why = dispatch.op_table(backend)["augment"]["why"]
    assert "'Some Other GPU' is not in kernel_winners.json" in why and GPU in why


def test_a_winner_that_cannot_run_here_gives_way_to_torch(stand_in, monkeypatch):
    monkeypatch.setattr(dispatch, "unavailable_reason", lambda b, d: "no Triton here")
    backend = dispatch.resolve_backend("auto", "cuda")
    assert backend == "torch" and "triton cannot run here (no Triton here): torch's" in backend.why["augment"]


def test_the_committed_table_loads_and_names_only_gpu_backends():
    table = kernel_winners.load_table()
    for gpu, entry in table["gpus"].items():
        for op, row in entry["ops"].items():
            assert op in dispatch.CATALOGUE and row["winner"] in kernel_winners.GPU_BACKENDS, (gpu, op)
    if not torch.cuda.is_available():  # unlisted (this machine has no GPU to name)
        assert kernel_winners.choices("none", ["augment"], table)[0] == {"augment": "torch"}


def test_a_table_of_another_schema_is_a_one_line_error(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text('{"schema_version": 9, "gpus": {}}')
    with pytest.raises(ValueError, match="not a kernel winners table of schema 1") as e:
        kernel_winners.load_table(bad)
    assert len(str(e.value).splitlines()) == 1


def _arm(name, ms, ops=None, first=2.30, last=1.1, status="ok"):
    ops = {"bn_act": "torch", "augment": "torch", "conv_group": "torch", **(ops or {})}
    return {"arm": name, "status": status, "ops": ops, "step_ms": {"median": ms, "p10": ms, "p90": ms},
            "first_loss": first, "last_loss": last}


def _in_step() -> dict:
    """A made-up in-step result (tools/step_timing.py's layout) on GPU."""
    return {"kind": "in-step", "recorded": "2026-11-28T09:00:00Z", "settings": {"replays": 200},
            "environment": {"gpu": {"name": GPU}, "git": {"sha": "def5678"}, "versions": {"torch": "2.13.0"}},
            "arms": [_arm("torch", 5.0), _arm("auto", 4.9, {"augment": "triton"}),
                     _arm("bn_act=triton", 4.6, {"bn_act": "triton"}),
                     _arm("bn_act=cuda", 4.4, {"bn_act": "cuda"}, first=2.9),  # fast, but wrong
                     _arm("augment=cuda", 5.1, {"augment": "cuda"}),
                     _arm("augment=triton", 4.95, {"augment": "triton"}, last=float("nan")),
                     _arm("bn_act=triton+augment=cuda", 4.0, {"bn_act": "triton", "augment": "cuda"}),
                     _arm("conv_group=triton", 0, {"conv_group": "triton"}, status="error"),
                     {"arm": "linear=triton", "status": "skipped", "reason": "budget"}]}


def test_in_step_rows_take_the_fastest_single_op_arm_that_beats_torch_and_agrees():
    rows = kernel_winners.in_step_rows(_in_step())
    assert set(rows) == {"bn_act", "augment"}  # conv_group's arm failed; combined arms count for none
    bn = rows["bn_act"]
    assert bn["winner"] == "triton" and bn["source"] == "in-step" and bn["replays"] == 200
    assert bn["step_ms"] == {"torch": 5.0, "triton": 4.6} and "cuda" in bn["rejected"]
    assert "first loss 2.9 against torch's 2.3" in bn["rejected"]["cuda"]
    assert bn["why"] == "bn_act on triton: 4.6 ms a captured step against torch 5 ms"
    aug = rows["augment"]  # cuda is slower than torch, triton's last loss is not finite
    assert aug["winner"] == "torch" and aug["step_ms"] == {"torch": 5.0, "cuda": 5.1}
    assert set(aug["rejected"]) == {"triton"}
    with pytest.raises(ValueError, match="no torch arm"):
        kernel_winners.in_step_rows({"arms": [_arm("auto", 1.0)]})


def test_an_in_step_result_replaces_the_eager_rows_of_the_ops_it_measured(stand_in, monkeypatch, tmp_path):
    gpu, table = kernel_winners.updated_table_in_step(stand_in, _in_step())
    assert gpu == GPU
    ops = table["gpus"][GPU]["ops"]
    assert ops["bn_act"]["source"] == "in-step" and ops["augment"]["source"] == "in-step"
    assert table["gpus"][GPU]["in_step"]["arms"]["torch"] == 5.0
    assert table["gpus"][GPU]["in_step"]["arms"]["linear=triton"] == "skipped"
    # a later eager suite keeps the in-step rows: eager medians never overrule the captured step
    _, again = kernel_winners.updated_table(table, _suite())
    assert again["gpus"][GPU]["ops"]["bn_act"]["source"] == "in-step"
    path = tmp_path / "in_step_winners.json"
    kernel_winners.write_table(table, path)
    monkeypatch.setattr(kernel_winners, "TABLE_PATH", path)
    backend = dispatch.resolve_backend("auto", "cuda")
    assert backend.choices["bn_act"] == "triton" and backend.choices["augment"] == "torch"
    ops_json = dispatch.op_table(backend)  # run.json's ops: which face, why, and the in-step figure
    assert ops_json["bn_act"]["why"].startswith(f"in-step (the captured step) measured on {GPU} 2026-11-28")
    assert ops_json["bn_act"]["in_step"]["step_ms"] == {"torch": 5.0, "triton": 4.6}
    assert "in_step" not in ops_json["conv_group"]
    assert pickle.loads(pickle.dumps(backend)).in_step == backend.in_step
    json.dumps(ops_json)
    with pytest.raises(ValueError, match="names no GPU"):
        kernel_winners.updated_table_in_step(stand_in, {**_in_step(), "environment": {}})
