"""The in-step benchmark: the CIFAR training step timed as the
trainer runs it, captured and replayed, with ``--kernels torch``, ``auto``
and each of our faces switched in one op at a time, at the recipe's shapes.

The arms and how one is timed are tools/step_arms.py's; this module runs
the arms in turn under a budget and is the command line
(benchmarks/bench_in_step.py). Cost: an arm with other kernels is another
compiled graph and other CUDA graphs, so on CUDA every arm runs in a
process of its own (``isolate``: fresh Dynamo caches and CUDA memory, and a
faulting kernel ends only its arm), paying the process start, the data's
placement and the compile warm-up (tens of seconds with Inductor's
max-autotune-no-cudagraphs; Inductor's and the autotuning caches on disk
shorten repeats). The budget stops starting arms that the mean arm so far
says would not finish in it, and a running arm's process is ended at the
budget; the result file is rewritten atomically after every arm, so a
command killed at its limit keeps what it measured. The result also
becomes the winners table of ``--kernels auto`` (dawnbench_fast/kernel_winners.py,
``--winners-out``). docs/GPU_SUITE.md ("The in-step benchmark") says how
to run it on a GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from dawnbench_fast import atomic, dispatch
from dawnbench_fast.cifar.recipe import RECIPES, apply_overrides
from dawnbench_fast.cifar.task import Config
from dawnbench_fast.execution.runtime import resolve_device
from tools.step_arms import Arm, arm_backend, default_arms, parse_arm, time_arm

SCHEMA_VERSION = 1
CHECKOUT = Path(__file__).resolve().parents[1]  # the folder holding tools/
# tiny shapes for the CPU dry run: seconds, not minutes (the static step's body, run eagerly);
# one thread: two spinning on a shared 2-core machine made a step 30x slower
DRY_RUN_SETS = ("subset=100", "eval_subset=50", "batch_size=50", "epochs=2", "whiten_images=50",
                "widths=8,16,16", "progressive=24", "whiten_bias_epochs=0", "lr_hold_epochs=0",
                "average_every=0", "tta_level=0", "capture=static", "compile=off", "precision=fp32",
                "threads=1")


def build_config(recipe: str, sets: list[str], dry_run: bool = False) -> Config:
    """The named recipe with ``sets`` applied (``--set`` pairs), after the dry
    run's tiny shapes where asked."""
    if recipe not in RECIPES:
        raise ValueError(f"recipe {recipe!r}: one of {', '.join(sorted(RECIPES))}")
    cfg = dataclasses.replace(Config(), **RECIPES[recipe])
    return apply_overrides(cfg, [*(DRY_RUN_SETS if dry_run else ()), *sets])


# -- Arms in turn, under a budget, each written out as it ends ----------------


@dataclass(frozen=True)
class Settings:
    """What every arm of one command shares (plain data: it crosses to an
    arm's own process as JSON)."""

    recipe: str = "dawnbench_fast"
    sets: tuple[str, ...] = ()
    dry_run: bool = False
    device: str = "auto"
    replays: int = 200
    profile_replays: int = 5


def prepared(settings: Settings) -> tuple[Config, torch.device, object]:
    """The trainer's process set-up for ``settings`` (cli.start_run: threads,
    device, cuDNN autotuning, the concrete precision; the conv method
    policy), and the data placed on the device: (config, device, DeviceData)."""
    from dawnbench_fast.cifar.cli import load_data, set_wgrad_policy
    from dawnbench_fast.runner import cli

    cfg = build_config(settings.recipe, list(settings.sets), settings.dry_run)
    cfg, device, w = cli.start_run(dataclasses.replace(cfg, device=settings.device))
    set_wgrad_policy(cfg)
    return cfg, device, load_data(cfg, device, w).device_data


def arm_here(settings: Settings, arm: Arm, ready: tuple | None = None) -> dict:
    """One arm in this process (``ready``: :func:`prepared`'s, reused);
    an arm that cannot run or fails is a record saying why, never an exception."""
    try:
        cfg, device, data = ready if ready is not None else prepared(settings)
        return time_arm(cfg, arm, data, device, settings.replays, settings.profile_replays)
    except dispatch.KernelsUnavailable as e:
        return {"arm": arm.name, "status": "unavailable", "reason": str(e)}
    except Exception as e:  # noqa: BLE001 - the next arm still runs; the record keeps the error
        return {"arm": arm.name, "status": "error", "reason": f"{type(e).__name__}: {e}"}


def arm_in_process(settings: Settings, arm: Arm, timeout_s: float, log: Path | None = None) -> dict:
    """One arm in a Python process of its own (``python -m
    tools.step_timing --one-arm``, the checkout on its PYTHONPATH: tools/ is
    never installed), ended at ``timeout_s``; its output kept in ``log``
    where given."""
    with tempfile.TemporaryDirectory(prefix="in_step_arm_") as tmp:
        spec, out = Path(tmp) / "spec.json", Path(tmp) / "arm.json"
        spec.write_text(json.dumps({"settings": dataclasses.asdict(settings), "arm": arm.name}))
        cmd = [sys.executable, "-m", "tools.step_timing", "--one-arm", str(spec), str(out)]
        r = run_ended_at(cmd, timeout_s, env=with_the_checkout(os.environ))
        if log is not None:
            atomic.write_text(log, f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}")
        if r.returncode is None:
            return {"arm": arm.name, "status": "stopped at the budget",
                    "reason": f"its process was ended after {timeout_s:.0f} s, the budget left"}
        if out.exists():
            return json.loads(out.read_text())
        tail = (r.stderr or r.stdout).strip().splitlines()[-5:]
        return {"arm": arm.name, "status": "error",
                "reason": f"its process exited {r.returncode}: " + " | ".join(tail)}


def unavailable(arm: Arm, device: torch.device) -> str | None:
    """Why ``arm`` cannot run on ``device`` (a face without a build or a
    device here), or None."""
    try:
        arm_backend(arm, device)
    except dispatch.KernelsUnavailable as e:
        return str(e)
    return None


def with_the_checkout(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the checkout (the folder holding tools/) first on
    PYTHONPATH, so that a ``python -m tools.X`` child finds the tools from
    any working directory."""
    paths = [str(CHECKOUT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def run_ended_at(cmd: list[str], timeout_s: float,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``cmd`` in a process session of its own (``env``: its environment,
    default this one's), its output captured; at ``timeout_s`` the whole
    process session (Inductor's compile workers too) gets TERM, then KILL ten
    seconds later, and ``returncode`` is None."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    try:
        out, err = proc.communicate(timeout=max(1.0, timeout_s))
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, None)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                out, err = proc.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        return subprocess.CompletedProcess(cmd, None, out or "", err or "")


def header(settings: Settings, device: torch.device, arms: list[Arm], budget_s: float, isolate: bool) -> dict:
    """The result file before its first arm: where, with what, and what is planned."""
    from dawnbench_fast.reporting import bench

    return {"schema_version": SCHEMA_VERSION, "kind": "in-step",
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "environment": bench.environment(device, "tools.step_timing"),
            "settings": {**dataclasses.asdict(settings), "sets": list(settings.sets)}, "budget_s": budget_s,
            "isolated": isolate, "planned": [a.name for a in arms], "arms": [], "stopped": None}


def time_in_step(cfg_overrides: list[str], arms: list[str], replays: int = 200, budget_s: float = 240.0,
                 device: str = "auto", *, recipe: str = "dawnbench_fast", dry_run: bool = False,
                 profile_replays: int = 5, isolate: str = "auto", out: Path | None = None) -> dict:
    """Time ``arms`` in turn (see the module's doc) and return the result,
    rewritten to ``out`` after every arm. ``isolate``: ``process`` (each arm
    in a process of its own), ``none`` (all in this one), ``auto`` (process
    on CUDA). No arm starts that the mean arm so far says would end past
    ``budget_s``; a running arm's process is ended at it."""
    if replays < 1 or profile_replays < 0:
        raise ValueError(f"--replays {replays}, --profile-replays {profile_replays}: at least 1 and 0")
    settings = Settings(recipe, tuple(cfg_overrides), dry_run, device, replays, profile_replays)
    build_config(recipe, list(cfg_overrides), dry_run)  # a bad --set is one line now, not per arm
    parsed = [parse_arm(a) for a in arms]
    dev = resolve_device(device)
    apart = isolate == "process" or (isolate == "auto" and dev.type == "cuda")
    # the process set-up before the header: bench.environment imports numba, after which
    # numba.set_num_threads (runtime.set_threads) put torch's threads back to all cores
    ready = None if apart else prepared(settings)
    result = header(settings, dev, parsed, budget_s, apart)
    t0, took = time.perf_counter(), []
    logs = None if out is None else Path(out).with_suffix(".logs")  # each arm's process's output
    for arm in parsed:
        left = budget_s - (time.perf_counter() - t0)
        mean = statistics.fmean(took) if took else 0.0
        if (why := unavailable(arm, dev)) is not None:  # said here, without a process of its own
            result["arms"].append({"arm": arm.name, "status": "unavailable", "reason": why, "wall_s": 0.0})
        elif left <= 0 or mean > left:
            result["stopped"] = "budget"
            result["arms"].append({"arm": arm.name, "status": "skipped", "reason": f"{left:.0f} s of the "
                                   f"{budget_s:.0f} s budget left; an arm so far took {mean:.0f} s"})
        else:
            t = time.perf_counter()
            log = None if logs is None else logs / f"{arm.name.replace('+', '_')}.log"
            rec = arm_in_process(settings, arm, left, log) if apart else arm_here(settings, arm, ready)
            took.append(time.perf_counter() - t)
            result["arms"].append({**rec, "wall_s": took[-1]})
        if out is not None:
            atomic.write_json(Path(out), result)
    return result


def summary(result: dict) -> str:
    """The result as a few console lines: each arm's step, its ratio to
    torch's and, where profiled, its kernel time by group (the max-pool's
    share is the pooling decision's figure)."""
    base = next((a["step_ms"]["median"] for a in result["arms"] if a["arm"] == "torch"
                 and a["status"] == "ok"), None)
    lines = []
    for a in result["arms"]:
        if a["status"] != "ok":
            lines.append(f"{a['arm']:>24}: {a['status']} ({a.get('reason', '')})")
            continue
        s = a["step_ms"]
        ratio = f", {s['median'] / base:.3f}x torch's" if base else ""
        lines.append(f"{a['arm']:>24}: step {s['median']:.3f} ms (p10 {s['p10']:.3f}, p90 {s['p90']:.3f})"
                     f"{ratio}; warm-up {a['warmup_s']:.1f} s")
        if a.get("kernel_time"):
            k = a["kernel_time"]
            groups = ", ".join(f"{g} {100 * r['share']:.1f}%" for g, r in k["groups"].items())
            lines.append(f"{'':>24}  kernels {k['kernel_us_per_step'] / 1e3:.3f} ms a step: {groups}")
    return "\n".join(lines) + "\n"


# -- The command line (benchmarks/bench_in_step.py) -----------------------------


def build_parser():
    import argparse

    p = argparse.ArgumentParser(
        prog="python benchmarks/bench_in_step.py",
        description="Time the captured CIFAR training step with --kernels torch, auto and each of our "
        "faces switched in one op at a time (arms); write the result JSON after every arm.")
    p.add_argument("--device", default="auto", help="auto, cuda, cuda:N or cpu")
    p.add_argument("--arms", default="", help="comma-separated: torch, auto, a backend, or op=face "
                   "(bn_act=triton; several ops joined by +); default: torch, auto, then every face "
                   "of the step's ops that can run here, one op at a time")
    p.add_argument("--replays", type=int, default=200, help="timed replays of each variant of the step")
    p.add_argument("--profile-replays", type=int, default=5,
                   help="replays of each variant under torch.profiler for the kernel time by group (0: none)")
    p.add_argument("--budget-s", type=float, default=240.0, help="start no arm that would end past this")
    p.add_argument("--recipe", default="dawnbench_fast", help="the named recipe (cifar.recipe.RECIPES)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="recipe field override")
    p.add_argument("--data-dir", help="CIFAR-10 folder (default: $DAWNBENCH_DATA, then the cache)")
    p.add_argument("--isolate", choices=("auto", "process", "none"), default="auto",
                   help="each arm in a process of its own (auto: on CUDA)")
    p.add_argument("--dry-run", action="store_true", help="tiny shapes, capture=static: the CPU check")
    p.add_argument("--out", help="the result JSON, rewritten after every arm")
    p.add_argument("--winners-out", metavar="PATH", help="the winners table of --kernels auto with this "
                   "GPU's in-step rows merged in (kernel_winners.py; default: kernel_winners.json beside "
                   "--out, on a GPU): copy it to dawnbench_fast/kernel_winners.json and commit it")
    p.add_argument("--winners-from", metavar="JSON", help="time nothing: merge this in-step result "
                   "(a run cut short keeps its finished arms) into the table at --winners-out")
    p.add_argument("--gpu-name", help="the GPU's name for the table (default: the result's, from NVML)")
    return p


def write_winners(result: dict, path: Path, name: str | None = None) -> str:
    """The committed winners table with ``result``'s in-step rows merged in,
    written to ``path``; returns a line saying what each measured op got."""
    from dawnbench_fast import kernel_winners

    gpu, table = kernel_winners.updated_table_in_step(kernel_winners.load_table(), result, name)
    kernel_winners.write_table(table, path)
    picks = ", ".join(f"{op} {row['winner']}" for op, row in table["gpus"][gpu]["ops"].items()
                      if row.get("source") == kernel_winners.IN_STEP)
    return f"in-step winners on {gpu} ({picks or 'no op measured alone'}) written to {path}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--one-arm"]:  # an arm's own process (arm_in_process)
        spec = json.loads(Path(argv[1]).read_text())
        settings = Settings(**{**spec["settings"], "sets": tuple(spec["settings"]["sets"])})
        atomic.write_json(Path(argv[2]), arm_here(settings, parse_arm(spec["arm"])))
        return 0
    a = build_parser().parse_args(argv)
    try:
        if a.winners_from:
            if not a.winners_out:
                raise ValueError("--winners-from needs --winners-out")
            print(write_winners(json.loads(Path(a.winners_from).read_text()), Path(a.winners_out),
                                a.gpu_name))
            return 0
        if not a.out:
            raise ValueError("--out FILE is required (the result JSON)")
        result = run_command(a)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"bench_in_step: {e}", file=sys.stderr)
        return 2
    print(summary(result), end="")
    print(f"written to {a.out}")
    gpu = a.gpu_name or ((result["environment"].get("gpu") or {}).get("name"))
    if not gpu and result["environment"].get("device", "").startswith("cuda"):  # no NVML: CUDA's name
        from dawnbench_fast import kernel_winners

        gpu = kernel_winners.gpu_name(torch.device(result["environment"]["device"]))
    if gpu and any(x["arm"] == "torch" and x["status"] == "ok" for x in result["arms"]):
        print(write_winners(result, Path(a.winners_out or Path(a.out).with_name("kernel_winners.json")), gpu))
    return 0


def run_command(a) -> dict:
    """The arms the command line names (default: :func:`default_arms`), timed."""
    sets = [*([f"data_dir={a.data_dir}"] if a.data_dir else []), *a.set]
    arms = [s for s in a.arms.split(",") if s] or default_arms(resolve_device(a.device))
    return time_in_step(sets, arms, a.replays, a.budget_s, a.device, recipe=a.recipe, dry_run=a.dry_run,
                        profile_replays=a.profile_replays, isolate=a.isolate, out=Path(a.out))


if __name__ == "__main__":
    sys.exit(main())
