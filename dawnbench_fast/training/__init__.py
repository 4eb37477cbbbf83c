"""The training floor, shared by every task: the task contract (task.py), the
loop and its time-to-accuracy clock (train.py), the seed driver with its
checkpoints and inference entry (runs.py), and saved weights and run
checkpoints (checkpoint.py)."""
