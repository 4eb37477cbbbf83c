"""The machine as the OS and the driver report it: the CPU, its features and
load, the per-user cache (machine.py); the GPU through NVML (gpu_info.py)."""
