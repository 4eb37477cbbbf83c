"""The device's timeline over profiled training steps: how long its kernels
ran, how long it sat idle between them, how many launches it took, and each
kernel's share of the kernel time: the profile of what is timed.

A step replayed as CUDA graphs launches its kernels from the graph, not from
host ops, so the roofline's attribution of kernels to ops (analysis.py) sees
them as unlinked; the timeline needs no link: it reads the device activity
alone. The idle time is the span from the first activity's start to the
last one's end, less the union of the activities' intervals: the gaps where
the GPU waited for the host (launches, Python, synchronisations) inside and
between the profiled steps. It is what a host-bound step wastes, and what a
captured step should bring under 10% of the step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dawnbench_fast.roofline.trace import Trace, short_kernel_name

# The runtime calls that launch work on the device, by kind.
KERNEL_LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                   "cudaLaunchCooperativeKernel")
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")


def kernel_family(name: str) -> str:
    """A kernel's name without its template arguments, parameters and
    Inductor's numbering: the unit the timeline's shares are given in."""
    return re.sub(r"_\d+$", "", short_kernel_name(name)) or name


@dataclass(frozen=True)
class Timeline:
    """Device activity over ``steps`` profiled steps (microseconds)."""

    steps: int
    span_us: float  # the first activity's start to the last one's end
    busy_us: float  # the union of the activities' intervals
    kernel_us: float  # the activities' summed durations (concurrent ones each counted)
    activities: int  # kernels, copies and sets the device ran
    kernel_launches: int  # host calls that launched one kernel
    graph_launches: int  # host calls that launched a CUDA graph
    shares: list[tuple[str, float, int]] = field(default_factory=list)  # family, share of kernel time, count

    @property
    def idle_us(self) -> float:
        return max(0.0, self.span_us - self.busy_us)

    @property
    def idle_share(self) -> float:
        return self.idle_us / self.span_us if self.span_us else 0.0

    def to_dict(self) -> dict:
        n = self.steps
        return {"steps": n, "per_step_us": {"span": self.span_us / n, "busy": self.busy_us / n,
                                             "kernel": self.kernel_us / n, "idle": self.idle_us / n},
                "idle_share": self.idle_share, "activities_per_step": self.activities / n,
                "kernel_launches_per_step": self.kernel_launches / n,
                "graph_launches_per_step": self.graph_launches / n,
                "shares": [{"kernel": k, "share": s, "count_per_step": c / n} for k, s, c in self.shares]}

    def text(self, top: int = 12) -> str:
        """The timeline as the profile's console and timeline.txt give it."""
        n = self.steps
        lines = [f"device timeline over {n} profiled step(s), per step: "
                 f"span {self.span_us / n / 1e3:.3f} ms, "
                 f"kernels {self.kernel_us / n / 1e3:.3f} ms, GPU idle {self.idle_us / n / 1e3:.3f} ms "
                 f"({100 * self.idle_share:.1f}% of the span); {self.activities / n:.0f} device activities, "
                 f"{self.kernel_launches / n:.0f} kernel launches and {self.graph_launches / n:.0f} graph "
                 "launches from the host"]
        for name, share, count in self.shares[:top]:
            lines.append(f"  {100 * share:5.1f}%  {name}  (x{count / n:.0f})")
        return "\n".join(lines) + "\n"


def timeline(trace: Trace, steps: int) -> Timeline | None:
    """The device timeline of ``trace`` (``steps`` profiled steps), or None
    where it holds no device activity (a CPU profile)."""
    if not trace.kernels:
        return None
    if steps < 1:
        raise ValueError(f"timeline over {steps} steps: need at least 1")
    spans = sorted((k.ts, k.ts + k.dur) for k in trace.kernels)
    busy, (start, end) = 0.0, spans[0]
    for s, e in spans[1:]:
        if s > end:  # a gap: close the running interval
            busy += end - start
            start, end = s, e
        else:
            end = max(end, e)
    busy += end - start
    by_family: dict[str, list[float]] = {}
    for k in trace.kernels:
        entry = by_family.setdefault(kernel_family(k.name), [0.0, 0])
        entry[0] += k.dur
        entry[1] += 1
    total = sum(k.dur for k in trace.kernels)
    shares = sorted(((f, d / total if total else 0.0, c) for f, (d, c) in by_family.items()),
                    key=lambda r: -r[1])
    calls = trace.runtime_calls
    return Timeline(steps, max(e for _, e in spans) - spans[0][0], busy, total, len(trace.kernels),
                    sum(calls.get(c, 0) for c in KERNEL_LAUNCHES),
                    sum(calls.get(c, 0) for c in GRAPH_LAUNCHES),
                    shares)
