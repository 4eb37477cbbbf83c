"""Read a PyTorch profiler Chrome trace (``prof.export_chrome_trace``) into op
trees (one per host thread) and GPU kernel records linked to the op that
launched them.

The exported trace carries no FLOPs; it carries, with ``record_shapes=True``,
each op's ``Input Dims``, ``Input type`` and ``Concrete Inputs``, which is what
the cost formulas need. Host ops nest by time on their thread; a GPU kernel
names its launching op through ``External id`` (or through the ``correlation``
of its ``cudaLaunchKernel``-like runtime call).
"""

from __future__ import annotations

import gzip
import json
import pathlib
from dataclasses import dataclass, field
from typing import Any

# A trace's top-level key naming how its op times were taken, and the value
# roofline/inplace.py writes there (absent: the profiler's own trace).
TIMER_KEY = "dawnbench_timer"
INPLACE_TIMER = "inplace"
HOST_CATS = {"cpu_op", "user_annotation", "operator", "Operator"}
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "hip_runtime"}


@dataclass
class Op:
    """One host-side op (or user annotation) and its nested children."""

    name: str
    ts: float
    dur: float
    tid: Any
    shapes: list = field(default_factory=list)
    dtypes: list = field(default_factory=list)
    concrete: list = field(default_factory=list)
    ext_id: int | None = None
    annotation: bool = False
    children: list[Op] = field(default_factory=list)
    parent: Op | None = field(default=None, repr=False)

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def self_time(self) -> float:
        return max(0.0, self.dur - sum(c.dur for c in self.children))

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()


@dataclass
class Kernel:
    """One GPU activity (kernel, memcpy, memset)."""

    name: str
    ts: float
    dur: float
    cat: str
    ext_id: int | None = None
    correlation: int | None = None
    op: Op | None = field(default=None, repr=False)  # launching host op, once linked


@dataclass
class Trace:
    path: str
    roots: list[Op]
    kernels: list[Kernel]
    device_properties: list[dict]
    has_shapes: bool
    timer: str = "profiler"  # how the op times were taken: the profiler, or "inplace" (inplace.py)
    # calls of the CUDA runtime and driver by name (cudaLaunchKernel, cudaGraphLaunch, ...)
    runtime_calls: dict[str, int] = field(default_factory=dict)

    @property
    def on_gpu(self) -> bool:
        """Whether the trace holds device activity (then time = device time)."""
        return bool(self.kernels)

    def ops(self):
        for r in self.roots:
            yield from r.walk()


class TraceError(ValueError):
    """The file is not a readable PyTorch profiler Chrome trace."""


def load_trace(path: str | pathlib.Path) -> Trace:
    """Parse a Chrome trace JSON (optionally .gz) written by torch.profiler."""
    p = pathlib.Path(path)
    if not p.exists():
        raise TraceError(f"trace file {p} does not exist; pass the JSON written by "
                         "prof.export_chrome_trace(...)")
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TraceError(f"trace file {p} is not valid JSON ({e}); pass the file written by "
                         "prof.export_chrome_trace(...)") from e
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"trace file {p} has no 'traceEvents' list; is it a PyTorch "
                         "profiler Chrome trace?")
    trace = parse_events(events, str(p), data.get("deviceProperties", []) if isinstance(data, dict) else [])
    if isinstance(data, dict) and data.get(TIMER_KEY) == INPLACE_TIMER:  # roofline/inplace.py
        trace.timer = INPLACE_TIMER
    return trace


def parse_events(events: list[dict], path: str = "<memory>", device_properties: list | None = None) -> Trace:
    host: dict[Any, list[Op]] = {}
    kernels: list[Kernel] = []
    runtime: list[tuple[dict, Any]] = []
    has_shapes = False
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        cat = e.get("cat", "")
        args = e.get("args") or {}
        if cat in HOST_CATS:
            shapes = args.get("Input Dims") or []
            has_shapes = has_shapes or bool(shapes)
            op = Op(
                name=e.get("name", "?"),
                ts=float(e["ts"]),
                dur=float(e["dur"]),
                tid=(e.get("pid"), e.get("tid")),
                shapes=shapes,
                dtypes=args.get("Input type") or [],
                concrete=args.get("Concrete Inputs") or [],
                ext_id=_int(args.get("External id")),
                annotation=cat == "user_annotation",
            )
            host.setdefault(op.tid, []).append(op)
        elif cat in DEVICE_CATS:
            kernels.append(
                Kernel(
                    name=e.get("name", "?"),
                    ts=float(e["ts"]),
                    dur=float(e["dur"]),
                    cat=cat,
                    ext_id=_int(args.get("External id")),
                    correlation=_int(args.get("correlation")),
                )
            )
        elif cat in RUNTIME_CATS:
            runtime.append((e, (e.get("pid"), e.get("tid"))))
    roots: list[Op] = []
    for ops in host.values():
        roots.extend(_nest(ops))
    roots.sort(key=lambda o: o.ts)
    trace = Trace(path, roots, kernels, list(device_properties or []), has_shapes)
    for e, _ in runtime:
        name = e.get("name", "?")
        trace.runtime_calls[name] = trace.runtime_calls.get(name, 0) + 1
    _link_kernels(trace, runtime)
    return trace


def short_kernel_name(name: str) -> str:
    """A demangled kernel name as ncu prints it, without its template and
    argument lists: ``void f<...>(...)`` -> ``f``."""
    base = name.split("(")[0].strip()
    if base.startswith("void "):
        base = base[5:]
    return base.split("<")[0].strip()


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _nest(ops: list[Op]) -> list[Op]:
    """Nest one thread's ops by time: an op that starts before the open op ends
    is its child (ends are clipped: exported timestamps are rounded)."""
    ops.sort(key=lambda o: (o.ts, -o.dur))
    roots: list[Op] = []
    stack: list[Op] = []
    for op in ops:
        while stack and op.ts >= stack[-1].end - 1e-6:
            stack.pop()
        if stack:
            op.parent = stack[-1]
            stack[-1].children.append(op)
        else:
            roots.append(op)
        stack.append(op)
    return roots


def _innermost_at(roots_by_tid: dict[Any, list[Op]], tid: Any, ts: float) -> Op | None:
    """The deepest op on thread ``tid`` whose interval contains ``ts``."""
    level = roots_by_tid.get(tid, [])
    found = None
    while level:
        nxt = None
        for op in level:
            if op.ts <= ts <= op.end:
                nxt = op
                break
        if nxt is None:
            break
        found = nxt
        level = nxt.children
    return found


def _link_kernels(trace: Trace, runtime: list[tuple[dict, Any]]) -> None:
    if not trace.kernels:
        return
    by_ext: dict[int, Op] = {}
    for op in trace.ops():
        if op.ext_id is not None and not op.annotation:
            by_ext.setdefault(op.ext_id, op)
    roots_by_tid: dict[Any, list[Op]] = {}
    for r in trace.roots:
        roots_by_tid.setdefault(r.tid, []).append(r)
    launch_by_corr: dict[int, tuple[dict, Any]] = {}
    for e, tid in runtime:
        corr = _int((e.get("args") or {}).get("correlation"))
        if corr is not None:
            launch_by_corr[corr] = (e, tid)
    for k in trace.kernels:
        op = by_ext.get(k.ext_id) if k.ext_id is not None else None
        if op is None and k.correlation in launch_by_corr:
            e, tid = launch_by_corr[k.correlation]
            op = _innermost_at(roots_by_tid, tid, float(e["ts"]))
        k.op = op
