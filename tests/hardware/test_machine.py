"""The CPU classes the project measures on, from /proc/cpuinfo's record."""

from __future__ import annotations

import pytest

from dawnbench_fast.hardware.machine import CPU_CLASSES, cpu_class, cpu_info


@pytest.mark.parametrize(("info", "cls"), [
    ({"vendor": "AuthenticAMD", "family": "25", "model": "17", "features": ["avx512_bf16"]}, "Zen 4"),
    ({"vendor": "AuthenticAMD", "family": 25, "model": 17}, "Zen 4"),  # numbers as a JSON may hold them
    ({"vendor": "AuthenticAMD", "family": "26", "model": "2", "features": ["avx512_bf16"]}, "Zen 5"),
    ({"vendor": "AuthenticAMD", "family": "26", "model": "17"}, "Zen 5"),
    ({"vendor": "GenuineIntel", "family": "6", "model": "207", "features": ["amx_bf16", "amx_tile"]}, "AMX"),
    ({"vendor": "AuthenticAMD", "family": "25", "model": "1", "features": ["avx2"]}, None),  # Zen 3
    ({"vendor": "GenuineIntel", "family": "6", "model": "85", "features": ["avx512f"]}, None),
    ({}, None),
])
def test_cpu_class(info, cls):
    assert cpu_class(info) == cls


def test_this_machine_s_class_is_one_of_the_classes_or_none():
    assert cpu_class(cpu_info()) in (*CPU_CLASSES, None)
