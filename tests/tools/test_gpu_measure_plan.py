"""The measuring plan (tools/gpu_suite/measure.py, tools/gpu_suite/plan.py) against a
fake clock and fake commands with an H200's measured durations: from a cold
machine a valid ratio comes back within 720 s of device time counted from
the first command, whatever our trainer's cold warm-up in
max-autotune-no-cudagraphs takes; and the plan's pure decisions (the
compile mode, a capture failure read from run.json, the ratio's validity).

The timeline (docs/GPU_SUITE.md, "The measuring procedure"): the machine's
start 150 s; three data commands of 35 s, the first starting the background
build (75 s) and warm-up (each mode: 10 s of process start, then its cold
warm-up: default 27 s as measured, max-autotune-no-cudagraphs 60, 150 or
250 s); then the measuring command, whose suite commands are simulated:
15 s to start a suite command, our process 10 s then its warm-up (10 s on
warm caches, else its cold one) and 5 s a seed, the published script 10 s,
its warm-up 155 s and 6 s a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.gpu_suite import background, measure, plan, training_parts

MACHINE_START_S, DATA_CALL_S, BUILD_S = 150.0, 35.0, 75.0
PROCESS_S, SUITE_START_S, DEFAULT_COLD_S, WARM_CACHE_S = 10.0, 15.0, 27.0, 10.0
OURS_RUN_S, PEER_WARMUP_S, PEER_RUN_S = 5.0, 155.0, 6.0
DEVICE_LIMIT_S = 720.0


class FakeClock:
    """Device time from the first command; sleeping lets the background go on."""

    def __init__(self, t: float, warmup: FakeWarmUp):
        self.t, self.background = t, warmup

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self.t += seconds
        self.background.catch_up(self.t)


class FakeWarmUp:
    """The background command's warm-up: a marker per mode at its time, unless ended first."""

    def __init__(self, work: Path, autotune_cold_s: float):
        self.work, self.ended_at, self.autotune_cold_s = work, None, autotune_cold_s
        start = MACHINE_START_S + BUILD_S
        self.done_at = {plan.DEFAULT_MODE: start + PROCESS_S + DEFAULT_COLD_S}
        self.done_at[plan.AUTOTUNE_MODE] = self.done_at[plan.DEFAULT_MODE] + PROCESS_S + autotune_cold_s
        self.end = self.done_at[plan.AUTOTUNE_MODE]

    def catch_up(self, t: float) -> None:
        for mode, at in self.done_at.items():
            path = background.marker_path(self.work / "cache", mode)
            if at <= t and (self.ended_at is None or at <= self.ended_at) and not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps({"mode": mode, "by": "the fake background"}))

    def alive(self, t: float) -> bool:
        return self.ended_at is None and t < self.end


def our_run(folder: Path, seed: int, warmup_s: float) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"seed{seed}.json"
    step = {"captured": True, "capture_failed": None}
    path.write_text(json.dumps({"result": {"seed": seed, "step": step}}))
    return {"seed": seed, "final_top1": 0.9412, "reached_target": True, "time_to_target_s": 2.3,
            "end_clock_s": 2.4, "warmup_s": warmup_s, "run_json": str(path)}


def fake_suite(clock: FakeClock, work: Path, calls: list[dict]):
    """A stand-in for run_logged: each suite command's time passes on the
    fake clock (cut at its timeout, as the real one is) and its part is
    written to suite.json as the suite would write it."""

    def run(m, cmd, log_name, timeout):
        log = work / "logs" / log_name
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("fake\n")
        part = cmd[cmd.index("--only") + 1]
        trainer = cmd[cmd.index("--trainer-args") + 1:] if "--trainer-args" in cmd else []
        mode = plan.given_mode(trainer) or plan.AUTOTUNE_MODE  # the trainer's own default on CUDA
        runs = int(cmd[cmd.index("--peer-runs") + 1]) if "--peer-runs" in cmd else 0
        warm = background.marker_path(work / "cache", mode).exists()
        assert not clock.background.alive(clock.t), "a timed command while the background compiles"
        calls.append({"part": part, "mode": mode, "warm": warm, "at": clock.t, "timeout": timeout})
        t, rc, rec = SUITE_START_S, 0, {"status": "done"}
        if part == "peer":
            order = ["peer", "ours"] if "--peer-first" in cmd else ["ours", "peer"]
            block: dict = {"order": order}
            for side in order:
                if side == "ours":
                    cold = DEFAULT_COLD_S if mode == plan.DEFAULT_MODE else clock.background.autotune_cold_s
                    warmup = WARM_CACHE_S if warm else cold
                    took = PROCESS_S + warmup + runs * OURS_RUN_S
                    ran = [our_run(work / "peer" / "ours_block0", s, warmup) for s in range(runs)]
                else:
                    took = PROCESS_S + PEER_WARMUP_S + runs * PEER_RUN_S
                    ran = [{"run": str(k), "tta_val_acc": 0.9401, "time_seconds": 2.6} for k in range(runs)]
                if t + took > timeout:  # cut at the budget: nothing of that side comes back
                    block[side] = {"exit_status": None, "runs": []}
                    t, rc, rec = timeout, None, {"status": "partial"}
                    break
                t += took
                block[side] = {"exit_status": 0, "runs": ran, "wall_s": took}
            rec["blocks"] = [block]
        else:
            t = min(t + 60.0, timeout)
        clock.advance(t)
        data = json.loads((work / "suite.json").read_text())
        data["parts"]["roofline" if part == "roofline" else part] = rec
        (work / "suite.json").write_text(json.dumps(data))
        return rc, t, log

    return run


@pytest.fixture
def cold_machine(tmp_path, monkeypatch):
    """The measuring command's folder as the background command left it
    (the extension built), and the fakes in place; returns a runner of the
    command for a given cold warm-up of max-autotune-no-cudagraphs."""
    work = tmp_path / "w"
    work.mkdir()
    (work / "suite.json").write_text(json.dumps({"schema_version": 1, "commands": [], "parts": {
        "build": {"status": "done", "after": {"extension": True, "cuda": True}, "ended": "then"}}}))
    (work / background.BACKGROUND).write_text(json.dumps({"pid": 4242, "started": "then"}))
    monkeypatch.setattr(measure, "probe_machine", lambda m: {"torch": "2.9.0+cu128", "gpu": "NVIDIA H200"})
    for key in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):  # main() sets them for its commands
        monkeypatch.setenv(key, "unset")

    def command(autotune_cold_s: float) -> tuple[dict, list[dict], FakeClock]:
        warmup = FakeWarmUp(work, autotune_cold_s)
        clock = FakeClock(MACHINE_START_S + 3 * DATA_CALL_S, warmup)
        warmup.catch_up(clock.t)

        def end(pid, clk):
            warmup.ended_at = clk.monotonic()
            clk.advance(2.0)
            return "ended by TERM"

        monkeypatch.setattr(background, "pid_alive", lambda pid: warmup.alive(clock.t))
        monkeypatch.setattr(background, "end_background", end)
        calls: list[dict] = []
        rc = measure.main(["--work", str(work), "--no-stamp", "--peer", __file__,
                           "--cache-from", str(work / "none")], clock=clock,
                          run=fake_suite(clock, work, calls))
        assert rc == 0
        return json.loads((work / "suite.json").read_text())["measure"], calls, clock

    return command


@pytest.mark.parametrize("autotune_cold_s", [60.0, 150.0, 250.0])
def test_a_valid_ratio_comes_back_within_720_s_from_a_cold_machine(cold_machine, autotune_cold_s):
    rec, calls, clock = cold_machine(autotune_cold_s)
    ratio = rec["ratio"]
    assert ratio["ratio_end_clock"] == pytest.approx(2.4 / 2.6) and ratio["valid"], ratio
    assert ratio["ours"]["runs"] >= 5 and ratio["peer"]["runs"] >= 5  # the defaults' first block
    start = MACHINE_START_S + 3 * DATA_CALL_S
    assert start + ratio["at_s"] <= DEVICE_LIMIT_S, (autotune_cold_s, start + ratio["at_s"])
    (peer,) = [c for c in calls if c["part"] == "peer"]
    assert peer["warm"], "our runs paid a cold warm-up"
    # max-autotune only where its warm-up had finished; the background ended before any timed run
    assert rec["compile"]["mode"] == (plan.AUTOTUNE_MODE if autotune_cold_s == 60 else plan.DEFAULT_MODE)
    assert rec["background"]["waited_s"] <= 90 and [s["stage"] for s in rec["stages"]][0] == "build"
    assert rec["stages"][0]["status"] == "skipped"  # built in the background
    assert rec["our_step"] == {"captured": True, "capture_failed": None, "self_test": None}
    assert clock.t - start <= measure.COMMAND_LIMIT_S  # the measuring command within its limit


def test_choose_mode_takes_max_autotune_only_where_warm_or_where_it_fits():
    est = plan.Estimates()
    assert plan.choose_mode(None, {}, 330, 8, est)[0] == plan.DEFAULT_MODE
    assert plan.choose_mode(None, {plan.AUTOTUNE_MODE: "x"}, 330, 8, est)[0] == plan.AUTOTUNE_MODE
    assert plan.choose_mode(None, {}, est.block_s(8) + est.cold_autotune_s, 8, est)[0] == plan.AUTOTUNE_MODE
    given = ("reduce-overhead", "given in --trainer-args")
    assert plan.choose_mode("reduce-overhead", {}, 10, 8, est) == given
    trainer_args = ["--kernels", "auto", "--set", "compile_mode=default", "--set", "capture=off"]
    assert plan.given_mode(trainer_args) == "default"
    assert plan.given_mode(["--set", "lr=1"]) is None


def test_warmed_modes_reads_the_markers_and_old_restored_caches(tmp_path):
    assert plan.warmed_modes(tmp_path, restored=False) == {}
    assert list(plan.warmed_modes(tmp_path, restored=True)) == [plan.AUTOTUNE_MODE]  # made before markers
    marker = background.marker_path(tmp_path, plan.DEFAULT_MODE)
    marker.parent.mkdir()
    marker.write_text(json.dumps({"mode": plan.DEFAULT_MODE, "by": "warm-up"}))
    (marker.parent / "damaged.json").write_text("{")
    assert plan.warmed_modes(tmp_path, restored=True) == {plan.DEFAULT_MODE: "warm-up"}


def test_capture_failed_is_read_defensively():
    assert plan.capture_failed({"result": {"step": {"captured": False, "capture_failed": "cudaErrorX"}}}) == \
        "cudaErrorX"
    assert plan.capture_failed({"step": {"capture_failed": "at step 3"}}) == "at step 3"
    for older in ({}, {"result": {}}, {"result": {"step": None}}, {"result": {"step": {"captured": True}}}):
        assert plan.capture_failed(older) is None
        assert plan.step_record(older)["self_test"] is None
    tested = {"result": {"step": {"captured": True, "capture_failed": None, "self_test": {"ok": True}}}}
    assert plan.step_record(tested) == {"captured": True, "capture_failed": None, "self_test": {"ok": True}}


def _ours(top1: float, n: int) -> list[dict]:
    return [{"final_top1": top1, "end_clock_s": 2.0, "reached_target": top1 >= 0.94} for _ in range(n)]


def _peer(n: int) -> list[dict]:
    return [{"tta_val_acc": 0.9401, "time_seconds": 2.5} for _ in range(n)]


def test_the_ratio_is_invalid_below_the_bar_or_with_too_few_runs():
    good = plan.ratio_record(_ours(0.9405, 5), _peer(5), 0.94, 5, "peer stage")
    assert good["valid"] and good["invalid_why"] is None and good["ratio_end_clock"] == pytest.approx(0.8)
    assert good["ours"]["reached"] == 5 and good["peer"]["reached"] == 5
    low = plan.ratio_record(_ours(0.9390, 8), _peer(8), 0.94, 5, "peer stage")
    assert not low["valid"] and "top-1 93.90% is below 94.00%" in low["invalid_why"]
    assert low["ratio_end_clock"] == pytest.approx(0.8)  # reported, marked invalid
    few = plan.ratio_record(_ours(0.95, 3), _peer(8), 0.94, 5, "peer stage")
    assert not few["valid"] and "fewer than 5 runs (ours 3)" in few["invalid_why"]
    none = plan.ratio_record([], _peer(8), 0.94, 5, "peer stage")
    assert none["ratio_end_clock"] is None and "no run of ours" in none["invalid_why"]


def test_the_published_scripts_runs_fit_the_time_left_rather_than_be_cut():
    fit = training_parts.peer_runs_that_fit
    assert fit(400, 8, PEER_WARMUP_S, PEER_RUN_S) == 8
    assert fit(15 + 155 + 5 * 6 + 3, 8, PEER_WARMUP_S, PEER_RUN_S) == 5  # our side took longer than planned
    assert fit(100, 8, PEER_WARMUP_S, PEER_RUN_S) == 1  # never none: its warm-up may be shorter (caches)
