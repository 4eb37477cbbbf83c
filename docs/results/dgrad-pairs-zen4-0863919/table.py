"""The tables of README.md from this folder's benchmark files:

    python docs/results/dgrad-pairs-zen4-0863919/table.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from statistics import mean

HERE = Path(__file__).resolve().parent


def medians(path: Path) -> dict[str, float]:
    """Test name -> median seconds, of one pytest-benchmark file."""
    return {b["name"]: b["stats"]["median"] for b in json.loads(path.read_text())["benchmarks"]}


def main() -> None:
    ops = medians(HERE / "ops.json")
    print("| shape | oneDNN dense (ms) | FMA form (ms) | pair form (ms) | pairs / FMA |")
    print("|---|---|---|---|---|")
    for shape in ("64to256@15", "256to256@7", "24to64@31"):
        row = {k: ops[f"test_conv3x3_dgrad_pooled[{shape}-{k}]"] for k in ("onednn", "pooled-fma", "pooled")}
        print(f"| {shape} | {row['onednn'] * 1e3:.1f} | {row['pooled-fma'] * 1e3:.1f} | "
              f"{row['pooled'] * 1e3:.1f} | {row['pooled'] / row['pooled-fma']:.3f} |")
    print()
    print("| run (arm order) | FMA form (s) | pair form (s) | pairs / FMA |")
    print("|---|---|---|---|")
    ratios = []
    for path in sorted(HERE.glob("step-*.json")):
        steps = {re.sub(r".*\[|\]", "", k): v for k, v in medians(path).items() if "test_recipe_step[" in k}
        fma = steps["dawnbench_fast_cpu:dgrad=pooled-fma,progressive="]
        pairs = steps["dawnbench_fast_cpu:progressive="]
        order = "FMA first" if next(iter(steps)).startswith("dawnbench_fast_cpu:dgrad") else "pairs first"
        ratios.append(pairs / fma)
        print(f"| {path.stem} ({order}) | {fma:.3f} | {pairs:.3f} | {pairs / fma:.3f} |")
    print(f"| mean of the runs' ratios | | | {mean(ratios):.3f} |")


if __name__ == "__main__":
    main()
