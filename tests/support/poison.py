"""Poisoned outputs for the csrc op wrappers: every tensor a module's
``new_output`` allocates starts as NaN, so a kernel that skips an element,
or adds to what was there, fails its test."""

from __future__ import annotations

from types import ModuleType

import pytest


def poison_new_output(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> None:
    real = module.new_output
    monkeypatch.setattr(module, "new_output", lambda *a, **k: real(*a, **k).fill_(float("nan")))
