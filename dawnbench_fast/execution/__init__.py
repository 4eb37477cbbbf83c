"""How a run executes: the process set-up, device, threads and autocast
(runtime.py), the published GPU defaults (gpu_defaults.py: torch.compile,
cuDNN autotuning), and torchrun data parallelism (distributed.py)."""
