"""The optimisers' arithmetic as functions of explicit state: lists of
tensors in, tensors updated in place, learning rates as tensors on the
parameters' device. Nothing here reads a device value on the host or loops
over parameters in Python (foreach ops), so a GPU can capture it and
``torch.compile(fullgraph=True)`` traces it (tests/optim/test_updates.py).

One formulation is chosen per run, on purpose (``fma``, decided by the
step's plan, cifar.step). ``params += scale * update`` with ``scale`` a
tensor is, with ``fma``, ATen's add with ``alpha``: one fused multiply-add
per element, the very bits the Python-float learning rates gave, so the
CPU's trajectories (and its ten-seed record) are unchanged. On a GPU
``alpha`` would be read back on the host at every call, so there
(``fma=False``) it is a multiply then an add: a rounding more, and nothing
read back.
"""

from __future__ import annotations

import torch

Tensors = list[torch.Tensor]

def at_step(table: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """``table[step]`` for a 0-dim integer tensor ``step``, as an index_select:
    Python indexing with a 0-dim integer tensor reads it on the host (ATen
    turns it into a plain select), which on a GPU is a synchronisation."""
    return table.index_select(0, step.reshape(1))[0]


def group_rate(lrs: torch.Tensor | None, i: int, group: dict, device: torch.device) -> torch.Tensor:
    """Group ``i``'s rate this step: ``lrs[i]`` (a row of the learning-rate
    table), or the group's own ``lr`` for an optimiser stepped alone."""
    return lrs[i] if lrs is not None else torch.tensor(group["lr"], dtype=torch.float64, device=device)


def momentum_buffers(state: dict, params: Tensors) -> Tensors:
    """Each parameter's momentum buffer in an optimiser's ``state``, made
    (zeros: a fresh buffer) on first use."""
    for p in params:
        if "momentum_buffer" not in state[p]:
            state[p]["momentum_buffer"] = torch.zeros_like(p)
    return [state[p]["momentum_buffer"] for p in params]


def scaled_add_(params: Tensors, updates: Tensors, scale: torch.Tensor, fma: bool = True) -> None:
    """params[i] += scale * updates[i]; ``scale`` a 0-dim tensor on the params'
    device. ``fma``: one fused multiply-add (the CPU's), or a multiply then
    an add (a GPU's: what a captured graph replays)."""
    if fma:
        torch._foreach_add_(params, updates, alpha=scale)
    else:
        torch._foreach_add_(params, torch._foreach_mul(updates, scale.to(updates[0].dtype)))


def heavy_ball(grads: Tensors, bufs: Tensors, momentum: float) -> Tensors:
    """Momentum as torch.optim.SGD computes it (dampening 0): each buffer
    becomes momentum x buffer + grad, and is the update. A zero buffer is a
    fresh one: its first step takes the grad as it is."""
    torch._foreach_mul_(bufs, momentum)
    torch._foreach_add_(bufs, grads)
    return bufs


def nesterov(grads: Tensors, bufs: Tensors, momentum: float) -> Tensors:
    """Nesterov momentum: the buffers as :func:`heavy_ball` moves them; the
    update is grad + momentum x buffer."""
    return torch._foreach_add(grads, heavy_ball(grads, bufs, momentum), alpha=momentum)


def sgd_update(params: Tensors, grads: Tensors, bufs: Tensors, neg_lr: torch.Tensor, momentum: float,
               weight_decay: float, fma: bool = True) -> None:
    """One Nesterov SGD step of torch.optim.SGD's arithmetic (coupled weight
    decay: grad + weight_decay x param), ``neg_lr`` = -lr as a tensor."""
    if weight_decay:
        grads = torch._foreach_add(grads, params, alpha=weight_decay)
    scaled_add_(params, nesterov(grads, bufs, momentum), neg_lr, fma)
