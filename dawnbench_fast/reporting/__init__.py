"""What a run leaves behind: the DAWNBench files, run.json and the console
summary (bench.py), the per-epoch log (run_log.py, tensorboard_log.py), and
the plot and HTML page made from them (run_report.py)."""
