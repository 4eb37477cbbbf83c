"""What turns a task into a command: the flags every trainer shares, their
checks and one-line errors, the process set-up (cli.py); the run command
every task's CLI hands its pieces to (command.py); the seed driver with its
checkpoints, ``--resume`` and the inference entry (runs.py)."""
