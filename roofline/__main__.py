"""Entry point of ``python -m dawnbench_fast.roofline``."""

from dawnbench_fast.roofline.cli import main

raise SystemExit(main())
