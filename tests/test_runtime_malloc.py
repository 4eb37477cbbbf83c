"""runtime.keep_freed_memory: large tensors freed and allocated again reuse
mapped pages (no page faults), and DAWNBENCH_MALLOC=system leaves malloc alone.

Each case runs in a child process: mallopt changes the whole process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CHILD = r"""
import json, resource, torch
from dawnbench_fast import runtime
mode = runtime.keep_freed_memory()
def faults_of_second_alloc():
    x = torch.empty(64 << 20, dtype=torch.uint8); x.fill_(1); del x  # 64 MiB, touched
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    y = torch.empty(64 << 20, dtype=torch.uint8); y.fill_(2)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    assert int(y[12345]) == 2
    return after - before
print(json.dumps({"mode": mode, "reported": runtime.malloc_mode(), "faults": faults_of_second_alloc()}))
"""


def child(env_value: str | None) -> dict:
    env = dict(os.environ)
    env.pop("DAWNBENCH_MALLOC", None)
    if env_value is not None:
        env["DAWNBENCH_MALLOC"] = env_value
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
def test_heap_mode_reuses_pages_and_system_mode_does_not():
    heap, system = child(None), child("system")
    assert heap["mode"] == heap["reported"] == "heap"
    assert system["mode"] == system["reported"] == "system"
    pages = (64 << 20) // 4096
    # malloc's default mmaps a 64 MiB block afresh: every page faults in again
    # (fewer with transparent huge pages, still far above the heap mode's few).
    assert heap["faults"] < pages // 50, heap
    assert system["faults"] > 2 * heap["faults"] + 20, (system, heap)
