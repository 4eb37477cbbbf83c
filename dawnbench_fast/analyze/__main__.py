"""``python -m dawnbench_fast.analyze COMMAND ...``: the command line of the
analyses (one module per command beside this one)."""

from __future__ import annotations

import argparse
import sys

from dawnbench_fast.runner import stopping

if __name__ == "__main__":  # first, before torch is imported: a stop then is one line and 130 or 143
    stopping.catch_stops_from_start_up("python -m dawnbench_fast.analyze")

# after the handlers, on purpose
from dawnbench_fast.analyze import (  # noqa: E402
    batch_size,
    leaderboard,
    lesion,
    stability,
    thresholds,
)
from dawnbench_fast.analyze.study_cli import PROG, release_out, split_trainer_args  # noqa: E402
from dawnbench_fast.runner import cli  # noqa: E402

COMMANDS = (stability, thresholds, batch_size, lesion, leaderboard)


def build_parser() -> argparse.ArgumentParser:
    p = cli.OneLineParser(
        prog=PROG, description="The DAWNBench analyses: each trains (or reads with --from) the runs it "
        "needs and writes <command>.json, .png and .txt into --out. Trainer flags for every run go after "
        "--, e.g. `stability --runs 5 -- --kernels torch`. docs/ANALYSIS.md has the details.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=cli.OneLineParser)
    for module in COMMANDS:
        module.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, trainer_args = split_trainer_args(argv)

    def command() -> int:
        args = build_parser().parse_args(ours)
        args.trainer_args = trainer_args
        try:
            return args.command_fn(args)
        finally:  # the --out the command claimed (study_cli.resolve_out), whatever happened
            release_out(args)

    return cli.guarded(PROG, command)


if __name__ == "__main__":
    sys.exit(stopping.run_main(main))
