"""Host arrays onto the device without making the host wait.

Host-made data (CIFAR's epoch order, once an epoch: its augmentation is then
keyed on the device from it) goes to the GPU while the GPU works on the
previous epoch's last steps. PyTorch copies from ordinary (pageable) host
memory and then synchronises the stream, so a plain ``.to("cuda")`` makes the
host wait until every kernel queued before it has run: a host
synchronisation, which stops the host from queueing the next steps while the
GPU works. Through pinned memory the copy is
asynchronous: the host queues it and goes on; the copy runs in stream order,
so the kernels that read it still see it.
"""

from __future__ import annotations

import numpy as np
import torch


def to_device(a: np.ndarray | torch.Tensor, device: torch.device | str,
              dtype: torch.dtype | None = None) -> torch.Tensor:
    """``a`` as a tensor on ``device`` (with ``dtype``, if given). A host array
    bound for a CUDA device goes through pinned memory with a non-blocking
    copy; on the CPU, or already on the device, it is ``torch.as_tensor``'s
    usual copy-free result."""
    device = torch.device(device)
    t = torch.as_tensor(a)
    if dtype is not None:
        t = t.to(dtype)
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device)
    # The caching host allocator keeps the pinned block until the copy has run,
    # so the temporary may be dropped at once.
    return t.pin_memory().to(device, non_blocking=True)
