"""A numba augmentation: one compiled parallel pass from the padded uint8
dataset to a normalised float32 channels_last batch.

Not the ``cpu`` backend's ``augment``: the C++/OpenMP build of csrc/ was
measured faster (docs/PERFORMANCE.md, "CUDA C++ kernels and their CPU build")
and serves it (csrc/augment.py). This one stays as a second, independent CPU
implementation that tests/ops/test_augment.py checks against the reference and
benchmarks/bench_csrc_cpu.py times; it is registered with dispatch nowhere.

Bit-identical to the ``torch`` reference (same float32 multiply then add, no
fastmath). Parameters come from :func:`dawnbench_fast.data.augment.augment_params`.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from dawnbench_fast.data.augment import AugmentParams


@numba.njit(parallel=True, cache=True, nogil=True)
def _augment_kernel(padded, indices, ox, oy, flip, cut_x, cut_y, cutout, scale, shift, out):
    n, size, _, chans = out.shape
    for b in numba.prange(n):
        src = padded[indices[b]]
        y0, x0 = oy[b], ox[b]
        for y in range(size):
            in_cut_y = cutout > 0 and cut_y[b] <= y < cut_y[b] + cutout
            for x in range(size):
                sx = x0 + (size - 1 - x if flip[b] else x)
                if in_cut_y and cut_x[b] <= x < cut_x[b] + cutout:
                    for c in range(chans):
                        out[b, y, x, c] = 0.0
                else:
                    for c in range(chans):
                        v = np.float32(src[y0 + y, sx, c]) * scale[c]
                        out[b, y, x, c] = v + shift[c]


def augment_cpu(
    padded: torch.Tensor,
    indices: torch.Tensor,
    params: AugmentParams,
    scale: torch.Tensor,
    shift: torch.Tensor,
    size: int = 32,
) -> torch.Tensor:
    """Same contract as the torch reference; CPU tensors only."""
    if padded.device.type != "cpu":
        raise ValueError("the cpu augment kernel needs the dataset in CPU memory")
    idx = indices.numpy().astype(np.int64, copy=False)
    out = np.empty((len(idx), size, size, padded.shape[-1]), dtype=np.float32)
    _augment_kernel(
        padded.numpy(),
        idx,
        params.ox.numpy(),
        params.oy.numpy(),
        params.flip.numpy(),
        params.cut_x.numpy(),
        params.cut_y.numpy(),
        params.cutout,
        scale.numpy(),
        shift.numpy(),
        out,
    )
    return torch.from_numpy(out).permute(0, 3, 1, 2)
