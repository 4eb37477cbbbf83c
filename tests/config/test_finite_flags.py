"""Every float flag of the command lines refuses nan and inf:
``float()`` reads them, and a range check alone lets one through (a budget of
inf never runs out; nan passes a flag with no range). One line naming the
flag, exit status 2, before anything is read, measured or written."""

from __future__ import annotations

import argparse

import pytest

from dawnbench_fast.analyze.__main__ import build_parser as analyze_parser
from dawnbench_fast.cifar import build_parser as cifar_parser
from dawnbench_fast.config.overrides import finite_float
from dawnbench_fast.roofline.cli import _parser as roofline_parser

# (the parser, its flags before the value, the flag's name)
FLAGS = [
    (roofline_parser, ["peaks", "--seconds"], "--seconds"),
    (analyze_parser, ["stability", "--target"], "--target"),
    (analyze_parser, ["lesion", "--target"], "--target"),
    (cifar_parser, ["--epochs"], "--epochs"),
    (cifar_parser, ["--target"], "--target"),
    (cifar_parser, ["--cost-per-hour"], "--cost-per-hour"),
]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "Infinity"])
@pytest.mark.parametrize("case", range(len(FLAGS)))
def test_a_non_finite_float_flag_is_one_line_and_exit_2(capsys, case, value):
    parser, words, flag = FLAGS[case]
    with pytest.raises(SystemExit) as e:
        # --flag=VALUE: argparse takes a lone "-inf" for an option, not a value
        parser().parse_args([*words[:-1], f"{words[-1]}={value}"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"argument {flag}: {value}: must be a finite number" in err[0], err


def test_finite_float_reads_numbers_and_refuses_words():
    assert finite_float("0.5") == 0.5 and finite_float("1e3") == 1000.0
    with pytest.raises(argparse.ArgumentTypeError, match="expected a number"):
        finite_float("fast")
