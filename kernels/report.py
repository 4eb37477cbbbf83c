"""``python -m dawnbench_fast.kernels.report``: compile every Triton kernel
variant for sm_80 and sm_90 (no GPU needed) and list registers, shared
memory, spills (local memory), warps and stages per config from the compiled metadata.

Options: ``--json`` prints one JSON list instead of the table;
``--target sm_80|sm_90`` restricts to one architecture; ``--only PREFIX``
(repeatable) to the variants whose name starts with it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dawnbench_fast.kernels.report",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    p.add_argument("--one-per-kernel", action="store_true",
                   help="compile only the first variant of each kernel (quick check)")
    p.add_argument("--target", choices=["sm_80", "sm_90"], action="append",
                   help="architecture(s) to compile for (default: both)")
    p.add_argument("--only", action="append", metavar="PREFIX",
                   help="compile only the variants whose name starts with PREFIX "
                        "(e.g. 'conv3x3_fwd[bf16'; repeatable)")
    args = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("report: unset TRITON_INTERPRET (triton.compile does not work under the "
              "interpreter): env -u TRITON_INTERPRET python -m dawnbench_fast.kernels.report",
              file=sys.stderr)
        return 2
    from dawnbench_fast.kernels.aot import compile_spec, specs

    targets = args.target or ["sm_80", "sm_90"]
    chosen = [s for s in specs(args.one_per_kernel)
              if not args.only or s.name.startswith(tuple(args.only))]
    if not chosen:
        print(f"report: no kernel variant starts with {args.only}; the names are listed by "
              "python -m dawnbench_fast.kernels.report", file=sys.stderr)
        return 2
    rows = [compile_spec(s, t) for t in targets for s in chosen]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    head = (f"{'target':6} {'kernel':50} {'config':22} {'regs':>4} {'smem B':>7} "
            f"{'local B':>7} {'stack B':>7} {'warps':>5} {'stages':>6}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['target']:6} {r['kernel']:50} {r['config']:22} {r.get('registers', '?'):>4} "
              f"{r['shared_bytes']:>7} {r.get('local_bytes', '?'):>7} {r.get('stack_bytes', '?'):>7} "
              f"{r['num_warps']:>5} "
              f"{r['num_stages']:>6}")
    print("smem B: shared memory per block (Triton metadata). local B / stack B: local memory\n"
          "and stack frame per thread (cuobjdump); spilled registers live there, so 0/0 means\n"
          "no spills. Figures come from the ptxas that this triton bundles.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
