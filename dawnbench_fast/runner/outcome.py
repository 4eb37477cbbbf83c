"""What a finished training command says besides its report: its exit status
(``--fail-below-target``) and what its DAWNBench files still lack to be a
submission.

A run that misses the target is a measurement, not a failure, so it exits 0
by default; scripts and CI gates that want a verdict ask for one.
"""

from __future__ import annotations

import argparse

# The exit status of a command whose run (any of --runs N) missed --target, under
# --fail-below-target: apart from 1 (a crash's traceback), 2 (a user error), 130 (^C)
# and 143 (SIGTERM), so that a gate can tell "measured, and short" from "broken".
MISSED_TARGET_STATUS = 3

# The submission fields a user must name (flag, dest, what the files hold without it).
# The hardware is detected, but as "<CPU model>, N threads" or the GPU's name, not
# DAWNBench's "1 x V100 (AWS p3.2xlarge)"; the author is only a file-name prefix.
SUBMISSION_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("--code-url", "code_url", "codeURL is empty"),
    ("--author", "author", "author is this project's name"),
    ("--email", "email", "authorEmail is empty"),
    ("--hardware", "hardware", "hardware is the detected device"),
)


def exit_status(summaries: list[dict], args: argparse.Namespace) -> int:
    """0, or :data:`MISSED_TARGET_STATUS` when ``--fail-below-target`` was given
    and a run's clock never reached the target (``tta_seconds`` None)."""
    if getattr(args, "fail_below_target", False) and any(s["tta_seconds"] is None for s in summaries):
        return MISSED_TARGET_STATUS
    return 0


def missed_line(summaries: list[dict], target: float) -> str:
    """The one stderr line of a command that exits :data:`MISSED_TARGET_STATUS`."""
    missed = sum(s["tta_seconds"] is None for s in summaries)
    return (f"missed the target: {missed} of {len(summaries)} run(s) never reached {100 * target:.2f}% "
            f"(--fail-below-target: exit status {MISSED_TARGET_STATUS})")


def submission_gaps(args: argparse.Namespace) -> list[str]:
    """The submission flags not given on the command line, each with what the
    files hold instead. ``args.given`` (config_file.parse_args records it)
    tells a flag left at its default from one given: the author's default is
    a real name, only not the user's."""
    given = getattr(args, "given", set())
    return [f"{flag} ({instead})" for flag, dest, instead in SUBMISSION_FLAGS if dest not in given]


def submission_line(args: argparse.Namespace) -> str | None:
    """The summary's line on what a DAWNBench submission of these files still
    lacks; None when every submission flag was given."""
    gaps = submission_gaps(args)
    if not gaps:
        return None
    return "not yet a DAWNBench submission: pass " + ", ".join(gaps)
