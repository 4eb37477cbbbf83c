"""roofline/ counts our own ops in a fresh process without naming them: the
cost tables arrive through entry points and load without Triton or the built
extension. (Import cycles and sizes of every module: tests/test_house.py.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

# The roofline's view: the dawnbench:: ops its entry-point tables cost, with
# Triton, CuPy and the built extension unimportable.
ROOFLINE_OPS = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('triton', 'cupy') or name == 'dawnbench_fast._C':
            raise ImportError('blocked ' + name)
sys.meta_path.insert(0, Block())
from dawnbench_fast.roofline import registry
print(' '.join(o for o in registry.registered_ops() if o.startswith('dawnbench::')))
"""
# Every custom op the op modules define (the providers of every backend).
DEFINED_OPS = """
import importlib
import torch
from dawnbench_fast import dispatch
for module in sorted({m for mods in dispatch._PROVIDERS.values() for m in mods}):
    importlib.import_module(module)
print(' '.join(n for n in torch._C._dispatch_get_all_op_names() if n.startswith('dawnbench::')))
"""


def _ops(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return set(out.stdout.split())


def test_cost_tables_load_without_triton_or_the_extension():
    # the CLI on a machine without Triton or a built csrc still counts our ops
    costed = _ops(ROOFLINE_OPS)
    pytest.importorskip("triton")
    defined = _ops(DEFINED_OPS)
    assert defined and costed == defined, f"without an entry-point cost: {sorted(defined - costed)}"
