"""The DAWNBench analyses as commands (``python -m dawnbench_fast.analyze``):

- ``stability``: N seeds of a recipe; time to accuracy and accuracy spread.
- ``thresholds``: time to 90..94% from every-epoch evaluations.
- ``batch-size``: time to accuracy and throughput against the batch size.
- ``lesion``: one lever switched off at a time, against the baseline.
- ``leaderboard``: a run placed among the published CIFAR-10 records.

Each writes ``<command>.json``, ``.png`` and ``.txt`` into ``--out``; those
that train keep every run's folder under ``--out/runs/`` for ``--from``.
docs/ANALYSIS.md describes the commands and their outputs.
"""
