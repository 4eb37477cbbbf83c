"""Loss-guided epoch pruning: after the first epoch, skip part of the images
the net already classifies well, and weigh up the ones kept in their place.

The idea is InfoBatch's (Qin et al., "InfoBatch: Lossless Training Speed Up
by Unbiased Dynamic Data Pruning", ICLR 2024): each image's training loss from
its last step ranks it; a random share of the lower-loss half sits out the
epoch, and the rest of that half count ``1 / (1 - share)`` in the loss, so
the epoch's expected gradient is the full epoch's. The last epochs train on
every image ("annealing"), as the schedule's small learning rates need them.

Two choices differ from InfoBatch's so that a run's length is known before
it starts (the learning-rate schedule decays over the run's steps): the
lower-loss half is exactly half (not the images below the mean loss), and a
fixed number of them is dropped, chosen by a generator keyed by seed and
epoch, so a resumed run drops the same images.
"""

from __future__ import annotations

import numpy as np
import torch

# keyed-RNG stream of the dropped images (data.augment uses 0-2, progressive 7)
STREAM_PRUNE = 8


def pruned_epoch(epoch: int, epochs: float, share: float, until: float) -> bool:
    """Whether ``epoch`` is pruned: never the first (no losses yet), nor those
    from ``until`` of the run's ``epochs`` on (the annealing epochs)."""
    return share > 0.0 and 0 < epoch < until * epochs


def dropped_count(n: int, share: float) -> int:
    """Images a pruned epoch leaves out: ``share`` of the lower-loss half of ``n``."""
    return int(share * (n // 2))


def prune_epoch(order: np.ndarray, sample_loss: torch.Tensor, share: float, seed: int,
                epoch: int) -> tuple[np.ndarray, torch.Tensor]:
    """The epoch's visiting ``order`` without the dropped images, and each
    image's loss weight (``1 / (1 - share)`` for the lower-loss half's images
    that stay, 1 for the others).

    ``sample_loss``: each training image's loss at its last step. The ranking
    is a stable sort (ties keep index order), so it does not depend on the
    sort's implementation."""
    n = len(sample_loss)
    easy = torch.argsort(sample_loss.detach().float().cpu(), stable=True)[: n // 2].numpy()
    drop = np.random.default_rng([seed, epoch, STREAM_PRUNE]).choice(
        easy, dropped_count(n, share), replace=False)
    keep = np.ones(n, dtype=bool)
    keep[drop] = False
    weight = torch.ones(n)
    weight[torch.from_numpy(easy)] = 1.0 / (1.0 - share)
    weight[torch.from_numpy(drop)] = 0.0  # never read: the dropped images are not in the order
    return order[keep[order]], weight


class EpochPruner:
    """One run's pruning: each training image's loss at its last step (the
    ranking, saved with the run's state), and the current epoch's weights."""

    def __init__(self, n: int, share: float, until: float, epochs: float, seed: int,
                 device: torch.device):
        self.share, self.until, self.epochs, self.seed = share, until, epochs, seed
        self.sample_loss = torch.zeros(n, device=device)
        self.weight: torch.Tensor | None = None  # this epoch's, when it is pruned

    def pruned(self, epoch: int) -> bool:
        return pruned_epoch(epoch, self.epochs, self.share, self.until)

    def images(self, epoch: int) -> int:
        """Images ``epoch`` visits: all, or all but the dropped ones."""
        n = len(self.sample_loss)
        return n - dropped_count(n, self.share) if self.pruned(epoch) else n

    def epoch_order(self, order: np.ndarray, epoch: int) -> np.ndarray:
        """The epoch's visiting order (without its dropped images when pruned)."""
        self.weight = None
        if not self.pruned(epoch):
            return order
        order, weight = prune_epoch(order, self.sample_loss, self.share, self.seed, epoch)
        self.weight = weight.to(self.sample_loss.device)
        return order

    def loss(self, idx: torch.Tensor, losses: torch.Tensor) -> torch.Tensor:
        """The step's loss from its examples' ``losses``, which rank them next."""
        self.sample_loss[idx] = losses.detach()
        return (losses if self.weight is None else losses * self.weight[idx]).sum()
