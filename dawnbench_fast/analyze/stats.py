"""The statistics every analysis reports: mean, sample standard deviation,
coefficient of variation, a Student-t confidence interval of the mean, and
the fraction of runs that reached a target.

No scipy: the t distribution's two-sided probability has a closed form for
integer degrees of freedom (Abramowitz & Stegun 26.7.3/26.7.4), and the
critical value is found from it by bisection, so any confidence level and any
number of runs work without a table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dawnbench_fast.reporting.bench import mean_std


def t_two_sided_probability(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with ``df`` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if t <= 0:
        return 0.0
    theta = math.atan(t / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 1:
        # odd df: (2/pi) [theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...)], df - 3 in the last power
        total, term = 0.0, 1.0
        if df > 1:
            total = 1.0
            for k in range(1, (df - 3) // 2 + 1):
                term *= c2 * (2 * k) / (2 * k + 1)
                total += term
        return 2.0 / math.pi * (theta + s * math.cos(theta) * total)
    # even df: sin [1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...], df - 2 in the last power
    total, term = 1.0, 1.0
    for k in range(1, (df - 2) // 2 + 1):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return s * total


def t_critical(confidence: float, df: int) -> float:
    """The t with P(|T| <= t) = ``confidence`` (e.g. 2.776 for 0.95 and df 4)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    low, high = 0.0, 1.0
    while t_two_sided_probability(high, df) < confidence:
        high *= 2.0
    for _ in range(200):  # halves the bracket to far below float precision
        mid = 0.5 * (low + high)
        if t_two_sided_probability(mid, df) < confidence:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def describe(values: Sequence[float], confidence: float = 0.95) -> dict:
    """n, mean, sample std, coefficient of variation (std / mean) and the
    ``confidence`` interval of the mean (mean +- t * std / sqrt(n)) of
    ``values``. None (JSON null) where a figure is undefined, never nan: no
    values at all, or an interval from a single value."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "std": None, "cv": None, "ci": None, "confidence": confidence}
    mean, std = mean_std(list(values))
    ci = None
    if n > 1:
        half = t_critical(confidence, n - 1) * std / math.sqrt(n)
        ci = [mean - half, mean + half]
    cv = std / mean if n > 1 and mean != 0 else None
    return {"n": n, "mean": mean, "std": std if n > 1 else None, "cv": cv, "ci": ci,
            "confidence": confidence}


def reached_fraction(times: Sequence[float | None]) -> dict:
    """How many of the runs' times to target are not None (reached), of how many."""
    k = sum(t is not None for t in times)
    return {"reached": k, "runs": len(times), "fraction": k / len(times) if times else None}
