"""The GPU suite's ops part (gpu_suite/suite.py): every custom op of the
dispatch catalogue at the recipe's shapes, each face timed against torch
eager and torch.compile of the op's reference, with its error against torch
eager.

Shapes are the default recipe's (dawnbench_fast.cifar.recipe): its batch,
widths and activation, bf16, channels_last, 32 px images (31 px after the 2x2
whitening conv). Faces: ``torch`` (the catalogue's reference, eager),
``torch.compile`` (that reference compiled), and each backend that has its
own implementation of the op and can run here (``triton``, ``cuda`` on a GPU;
``cpu`` on the CPU), plus the CUDA C++ tensor-core GEMM (``cuda:gemm_mma``,
not catalogued) beside ``matmul``. A backend without a face for an op is
listed with the reason, never timed as the reference in disguise.

Timing on CUDA: ``triton.testing.do_bench`` (median, L2 flushed before each
repetition), else CUDA events around each call after an L2 flush. Beside
that eager median (host time included: what an eager caller waits) each
face records its kernels' time from the profiler, which separates the
host's share from the GPU's; our faces also record the median through their
custom-op path (dawnbench_fast/op_path.py). (CUDA-graph replay was tried on
the H100 on 2026-11-26: a failed capture left the CUDA RNG in capture state
and every later case failed, so it is not part of the suite.) A dry run
(the CPU) calls each face once at tiny sizes and records no time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from unittest import mock

import numpy as np
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.cifar.recipe import CifarRecipe

DT = torch.bfloat16


@dataclass
class Case:
    """One op at one shape: how to build its inputs and run a face on them."""

    op: str
    name: str
    make: Callable[[torch.device], dict]  # the inputs, made once per case
    call: Callable[[Callable, dict], torch.Tensor]  # run one face; returns the output compared
    reference: Callable


def _nchw_cl(n: int, c: int, side: int, device: torch.device, grad: bool = False) -> torch.Tensor:
    x = torch.randn(n, c, side, side, device=device).to(DT).contiguous(memory_format=torch.channels_last)
    return x.requires_grad_(grad)


def _bn_act_case(b: int, c: int, side: int, act: str) -> Case:
    from dawnbench_fast.models.layers import BatchNorm

    def make(device: torch.device) -> dict:
        x = _nchw_cl(b, c, side, device, grad=True)
        return {"x": x, "g": torch.randn_like(x), "bn": BatchNorm(c).to(device)}

    def call(fn: Callable, t: dict) -> torch.Tensor:
        t["x"].grad = None
        y = fn(t["x"], t["bn"], act)
        y.backward(t["g"])
        return y

    return Case("bn_act", f"bn_act fwd+bwd {act} C={c} @{side}px b={b}", make, call,
                dispatch.reference("bn_act"))


def _bias_act_case(b: int, c: int, side: int, act: str) -> Case:
    def make(device: torch.device) -> dict:
        x = _nchw_cl(b, c, side, device, grad=True)
        return {"x": x, "g": torch.randn_like(x), "bias": torch.randn(c, device=device, requires_grad=True)}

    def call(fn: Callable, t: dict) -> torch.Tensor:
        t["x"].grad = t["bias"].grad = None
        y = fn(t["x"], t["bias"], act)
        y.backward(t["g"])
        return y

    return Case("bias_act", f"bias_act fwd+bwd {act} C={c} @{side}px b={b}", make, call,
                dispatch.reference("bias_act"))


def _conv_group_case(b: int, cin: int, cout: int, side: int, act: str) -> Case:
    from dawnbench_fast.models.layers import ConvGroup

    def make(device: torch.device) -> dict:
        torch.manual_seed(0)
        group = ConvGroup(cin, cout, act).to(device).to(memory_format=torch.channels_last)
        return {"x": _nchw_cl(b, cin, side, device, grad=True), "group": group}

    def call(fn: Callable, t: dict) -> torch.Tensor:
        group, x = t["group"], t["x"]
        x.grad = None
        group.zero_grad(set_to_none=True)
        with torch.autocast(x.device.type, dtype=DT):
            y = fn(group, x)
        y.float().sum().backward()
        return y

    return Case("conv_group", f"conv_group fwd+bwd {cin}->{cout} @{side}px b={b}", make, call,
                dispatch.reference("conv_group"))


def _augment_case(n_data: int, b: int) -> Case:
    from dawnbench_fast.data.augment import augment_params, normalisation

    def make(device: torch.device) -> dict:
        rng = np.random.default_rng(0)
        padded = torch.from_numpy(rng.integers(0, 256, (n_data, 36, 36, 3), dtype=np.uint8)).to(device)
        idx = torch.from_numpy(rng.permutation(n_data)[:b]).to(device)
        scale, shift = (torch.from_numpy(a).to(device) for a in normalisation((0.5,) * 3, (0.25,) * 3))
        # the parameters on the device, from the indices there, as the trainer makes them
        return {"padded": padded, "idx": idx, "p": augment_params(0, 1, idx),
                "scale": scale, "shift": shift}

    def call(fn: Callable, t: dict) -> torch.Tensor:
        out = fn(t["padded"], t["idx"], t["p"], t["scale"], t["shift"])
        return out.to(DT)

    return Case("augment", f"augment b={b} from {n_data} images", make, call, dispatch.reference("augment"))


def _matrix_case(op: str, m: int, k: int) -> Case:
    """Newton-Schulz on one filter bank [m, k], or its X @ X.T product."""
    def make(device: torch.device) -> dict:
        g = torch.randn(m, k, device=device)
        return {"g": g, "a": g.to(DT), "b": g.to(DT).t().contiguous()}

    if op == "newton_schulz":
        def call(fn: Callable, t: dict) -> torch.Tensor:
            return fn(t["g"], 3)
    else:
        def call(fn: Callable, t: dict) -> torch.Tensor:
            return fn(t["a"], t["b"])
    shape = f"{m}x{k}" if op == "newton_schulz" else f"{m}x{k} @ {k}x{m}"
    return Case(op, f"{op} {shape}", make, call, dispatch.reference(op))


def _linear_case(b: int, k: int) -> Case:
    def make(device: torch.device) -> dict:
        return {"x": torch.randn(b, k, device=device).to(DT), "w": torch.randn(10, k, device=device).to(DT)}

    def call(fn: Callable, t: dict) -> torch.Tensor:
        return fn(t["x"], t["w"])

    return Case("linear", f"linear (head) {b}x{k} -> 10", make, call, dispatch.reference("linear"))


def cases(dry_run: bool) -> list[Case]:
    """The catalogue's ops at the default recipe's shapes (tiny in a dry run)."""
    r = CifarRecipe()
    b = 8 if dry_run else r.batch_size
    w0, w1, w2 = r.widths
    whiten = 24  # the 2x2 whitening conv's outputs: 2 x 3 x 2 x 2 (its eigenvectors and their negation)
    out = [_augment_case(64 if dry_run else 50_000, b)]
    out += [_bn_act_case(b, c, s, r.act) for c, s in ((w0, 15), (w1, 7), (w2, 3))]
    out += [_bias_act_case(b, c, s, r.act) for c, s in ((w0, 15), (w1, 7), (w2, 3))]  # in no model
    out += [_conv_group_case(b, cin, cout, s, r.act) for cin, cout, s in ((whiten, w0, 31), (w0, w1, 15),
                                                                          (w1, w2, 7))]
    banks = [(w0, 9 * whiten), (w1, 9 * w0), (w2, 9 * w1)]
    out += [_matrix_case("newton_schulz", m, k) for m, k in banks]
    out += [_matrix_case("matmul", m, k) for m, k in banks]
    out.append(_linear_case(b, w2))
    return out


def faces(op: str, device: torch.device, dry_run: bool) -> list[tuple[str, Callable | None, str | None]]:
    """(name, function or None, why not) of every face of ``op`` on ``device``."""
    ref = dispatch.reference(op)
    backend = "inductor" if device.type == "cuda" and not dry_run else "eager"
    out: list[tuple[str, Callable | None, str | None]] = [
        ("torch", ref, None), (f"torch.compile[{backend}]", torch.compile(ref, backend=backend), None)]
    for b in (("triton", "cuda") if device.type == "cuda" else ("cpu",)):
        why = dispatch.unavailable_reason(b, device)
        if why is None and dispatch.op_table(b, [op])[op]["backend"] != b:
            why = f"the {b} backend has no {op} of its own (the reference serves it)"
        out.append((b, None if why else dispatch.get_op(op, b), why))
    if op == "matmul" and device.type == "cuda":
        from dawnbench_fast.csrc import engine as csrc_engine
        from dawnbench_fast.csrc import gemm as csrc_gemm

        why = csrc_engine._extension_reason()
        gemm_mma = None if why else (lambda a, b: csrc_gemm.gemm_mma(a, b).to(a.dtype))
        out.append(("cuda:gemm_mma", gemm_mma, why))
    return out


def _l2_flusher(device: torch.device) -> Callable[[], None]:
    buf = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device=device)
    return buf.zero_


def time_cuda(fn: Callable[[], object]) -> float:
    """Median milliseconds of ``fn`` on the current CUDA device, L2 flushed."""
    try:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
    except ImportError:
        pass
    flush = _l2_flusher(torch.device("cuda"))
    for _ in range(3):
        fn()
    times = []
    for _ in range(30):
        flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    diff = (out.detach().float() - ref.detach().float()).abs().max()
    return float(diff / ref.detach().float().abs().max().clamp_min(1e-12))


def kernel_time(fn: Callable[[], object], calls: int = 10) -> dict:
    """The GPU's own time a call, from the profiler's kernel records: the sum
    of kernel durations over ``calls`` calls (no host gaps, no L2 flush), the
    kernels a call launches and the largest of them. Under the profiler our
    ops take their custom-op path (dawnbench_fast/op_path.py), so a face's
    extra kernels of that path (running-stat copies) are counted here."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per_name: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            per_name.setdefault(e.name, []).append(e.time_range.elapsed_us())
    total_us = sum(sum(v) for v in per_name.values())
    top = sorted(per_name.items(), key=lambda kv: -sum(kv[1]))[:8]
    return {"kernel_ms": round(total_us / calls / 1e3, 5),
            "kernels_per_call": round(sum(len(v) for v in per_name.values()) / calls, 2),
            "top_kernels": [{"name": n[:90], "per_call": round(len(v) / calls, 2),
                             "us_per_call": round(sum(v) / calls, 2)} for n, v in top]}


def host_costs(device: torch.device, calls: int = 300) -> dict[str, float | str]:
    """Host microseconds a call of the pieces an eager op is made of, on
    tensors so small that the GPU never waits the host: what an op's wall
    time is made of where its kernels are shorter than its Python (bn_act's
    faces on the H100's host, 2026-11-26)."""
    from dawnbench_fast.kernels import bn_act as triton_bn_act
    from dawnbench_fast.models.layers import BatchNorm

    x2d = torch.randn(64, 64, device=device).to(DT)
    sc, sh = torch.ones(64, device=device), torch.zeros(64, device=device)
    t = torch.zeros(64, device=device)
    parts = torch.rand(4, 64, device=device)
    plain, custom = triton_bn_act.PLAIN, triton_bn_act.CUSTOM
    idx = torch.empty(0, device=device, dtype=torch.int8)
    # each of bn_act's six launches alone (plain path): a Triton launch's host time
    # grows with its arguments (bn_finalize has 17 and 4 constexprs)
    pieces: dict[str, Callable[[], object]] = {
        "torch.empty": lambda: torch.empty(64, device=device),
        "tensor.add_ (one kernel)": lambda: t.add_(1),
        "Triton launch (affine_act, plain)": lambda: plain.affine_act(x2d, sc, sh, "silu"),
        "custom op + Triton launch (affine_act)": lambda: custom.affine_act(x2d, sc, sh, "silu"),
        "Triton launch (channel_stats, plain)": lambda: plain.channel_stats(x2d, True),
        "Triton launch (bn_finalize, plain)": lambda: plain.bn_finalize(
            parts, parts, 256.0, sc, sh, sc.clone(), sc.clone(), 0.1, 1e-5, True, True),
        "Triton launch (bn_bwd_coefficients, plain)": lambda: plain.bn_bwd_coefficients(
            parts, parts, sh, sc, sc, 256.0, True),
        "Triton launch (bn_act_bwd_reduce, plain)": lambda: plain.bn_act_bwd_reduce(
            x2d, x2d, sc, sh, "silu"),
        "Triton launch (bn_act_bwd_apply, plain)": lambda: plain.bn_act_bwd_apply(
            x2d.view(1, 8, 8, 64), x2d.view(1, 8, 8, 64), sc, sh, sc, sh, idx, [1, 8, 8, 64], "silu"),
    }
    x = _nchw_cl(8, 64, 3, device, grad=True)
    g, bn = torch.randn_like(x), BatchNorm(64).to(device)
    ours = set()  # our faces, also timed through their custom ops
    for face in ("torch", "triton", "cuda"):
        if dispatch.unavailable_reason(face, device) is None:
            fn = dispatch.get_op("bn_act", face)
            name = f"bn_act fwd+bwd, {face} face"
            pieces[name] = lambda fn=fn: fn(x, bn, "silu").backward(g)
            if face != "torch":
                ours.add(name)
    out: dict[str, float | str] = {}
    for name, fn in pieces.items():
        out[name] = _host_us(fn, calls)
        if name in ours:
            with _custom_ops_path():
                out[f"{name}, custom-op path"] = _host_us(fn, calls)
        if name == "bn_act fwd+bwd, triton face":  # the face's own Python: every launch a no-op
            with launches_skipped(triton_bn_act):
                out[f"{name}, launches skipped"] = _host_us(fn, calls)
    return out


class _NoLaunch:
    """A Triton kernel whose launch does nothing (``kernel[grid](...)``)."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


@contextmanager
def launches_skipped(*modules) -> Iterator[None]:
    """Every ``*_kernel`` of each module replaced by :class:`_NoLaunch` for the duration."""
    with ExitStack() as stack:
        for module in modules:
            names = [n for n in vars(module) if n.endswith("_kernel")]
            stack.enter_context(mock.patch.multiple(module, **dict.fromkeys(names, _NoLaunch())))
        yield


def _host_us(fn: Callable[[], object], calls: int) -> float | str:
    """Host microseconds a call of ``fn`` (after 20 warm-up calls), or why it
    could not run here (one line)."""
    try:
        sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
        for _ in range(min(20, calls)):
            fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
    except Exception as e:  # noqa: BLE001 - a piece that cannot run here is a finding
        return _first_line(e)
    return round((time.perf_counter() - t0) / calls * 1e6, 2)


def _custom_ops_path():
    """DAWNBENCH_OP_PATH=custom for the duration: the ops' registered path."""
    from dawnbench_fast import op_path

    return mock.patch.dict("os.environ", {op_path.ENV: "custom"})


def _first_line(e: Exception) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"


def run_face(case: Case, fn: Callable, inputs: dict, ref_out: torch.Tensor | None,
             dry_run: bool, ours: bool = False) -> tuple[dict, torch.Tensor]:
    """One face of one case: its output (compared with torch eager's), the
    first call's seconds (compilation and autotuning, if any) and, on a GPU,
    its median time (eager, host included) and its kernels' time (profiler);
    for ``ours`` (a Triton or CUDA C++ face) also the median through the
    custom-op path."""
    t0 = time.perf_counter()
    out = case.call(fn, inputs)
    rec = {"first_call_s": round(time.perf_counter() - t0, 3),
           "rel_err_vs_torch": None if ref_out is None else _rel_err(out, ref_out)}
    if dry_run:
        return rec, out
    one = lambda: case.call(fn, inputs)  # noqa: E731 - the timed call, named once
    rec["median_ms"] = time_cuda(one)
    extra = [("median_ms_custom_ops", _timed_on_custom_ops)] if ours else []
    for key, measure in extra + [("kernels", kernel_time)]:
        try:
            rec.update(measure(one))
        except Exception as e:  # noqa: BLE001 - a face that cannot be profiled is a finding
            rec[f"{key}_error"] = _first_line(e)
    return rec, out


def _timed_on_custom_ops(fn: Callable[[], object]) -> dict:
    with _custom_ops_path():
        return {"median_ms_custom_ops": time_cuda(fn)}


def run_cases(add: Callable[[dict], None], dry_run: bool, deadline: Callable[[], bool],
              ops: set[str] | None = None) -> dict:
    """Every case's every face (of the ``ops`` named, default all); ``add(record)``
    as each finishes; stops (and says so) when ``deadline()`` is true."""
    device = torch.device("cuda" if torch.cuda.is_available() and not dry_run else "cpu")
    timer = "none (dry run)" if dry_run else "triton.testing.do_bench median, L2 flushed"
    host = {} if dry_run or (ops is not None and "bn_act" not in ops) else {"host_us": host_costs(device)}
    for case in (c for c in cases(dry_run) if ops is None or c.op in ops):
        inputs = case.make(device)
        ref_out = None
        for name, fn, why in faces(case.op, device, dry_run):
            if deadline():
                return {"device": str(device), "timer": timer, "stopped": True, **host}
            rec = {"op": case.op, "case": case.name, "impl": name, "median_ms": None}
            if fn is None:
                add({**rec, "status": "unavailable", "reason": why})
                continue
            try:
                measured, out = run_face(case, fn, inputs, ref_out, dry_run,
                                         ours=name in ("triton", "cuda"))
                ref_out = out if name == "torch" else ref_out
                add({**rec, **measured, "status": "ok"})
            except Exception as e:  # noqa: BLE001 - one face failing is a finding; the others still run
                add({**rec, "status": "error", "reason": _first_line(e)})
    return {"device": str(device), "timer": timer, "stopped": False, **host}
