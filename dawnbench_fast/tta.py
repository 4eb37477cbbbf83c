"""Test-time augmentation: the views of a batch of images, their weighted
mean in one forward, and selective TTA (the views only for the images the
one-view prediction is unsure of).

The views and weights are airbench's: the image and its mirror, and at level
2 the mirrored pair shifted by -1 and +1 px (reflect padding).
"""

from __future__ import annotations

import nvtx
import torch
import torch.nn.functional as F

from dawnbench_fast.train import NVTX_DOMAIN

# Level -> the weights of its views (tta_views' order): 1: the image and its
# mirror; 2: that pair at 0.5 plus the mirrored pairs shifted by -1 and +1 px
# (reflect padding) at 0.25.
TTA_WEIGHTS = {0: (1.0,), 1: (0.5, 0.5), 2: (0.25, 0.25, 0.125, 0.125, 0.125, 0.125)}


def tta_views(x: torch.Tensor, level: int) -> list[torch.Tensor]:
    """The test-time augmentation views of a batch, in TTA_WEIGHTS' order."""
    if level == 0:
        return [x]
    views = [x, x.flip(-1)]
    if level == 2:
        padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
        h, w = x.shape[-2:]
        for shifted in (padded[..., :h, :w], padded[..., 2:, 2:]):
            views += [shifted, shifted.flip(-1)]
    return views


def tta_logits(model: torch.nn.Module, x: torch.Tensor, level: int,
               first: torch.Tensor | None = None) -> torch.Tensor:
    """The weighted mean of the model's logits over ``x``'s views, all views in
    one forward (one call per image when serving, not one per view). ``first``:
    the logits of the identity view if already computed."""
    views = tta_views(x, level)
    if len(views) == 1:
        return model(x) if first is None else first
    todo = views if first is None else views[1:]
    with nvtx.annotate("tta_views", domain=NVTX_DOMAIN):  # Nsight names the views' forward
        out = model(torch.cat(todo)).unflatten(0, (len(todo), len(x)))
    if first is not None:
        out = torch.cat([first.to(out.dtype)[None], out])
    weights = torch.tensor(TTA_WEIGHTS[level], dtype=out.dtype, device=out.device)
    return torch.einsum("v,vnk->nk", weights, out)


def selective_tta_logits(model: torch.nn.Module, x: torch.Tensor, level: int,
                         below: float) -> torch.Tensor:
    """One view for every image; the TTA views (:func:`tta_logits`) only for
    the images whose one-view top probability is below ``below``. A row's
    result depends on that row alone, so batching does not change a prediction."""
    if level == 0 or below >= 1.0:
        return tta_logits(model, x, level)
    with nvtx.annotate("tta_one_view", domain=NVTX_DOMAIN):
        first = model(x)
    pick = (first.float().softmax(1).amax(1) < below).nonzero().squeeze(1)
    if len(pick) == 0:
        return first
    hard = x[pick].contiguous(memory_format=torch.channels_last)
    out = tta_logits(model, hard, level, first=first[pick])
    return first.to(out.dtype).index_copy(0, pick, out)
