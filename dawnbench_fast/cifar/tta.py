"""Test-time augmentation: the views of a batch of images, their weighted
mean in one forward, and selective TTA (the views only for the images the
one-view prediction is unsure of), in one step or as a cascade (the mirror
first, the shifted views only for the images still unsure after it).

The views and weights are airbench's: the image and its mirror, and at level
2 the mirrored pair shifted by -1 and +1 px (reflect padding).

Shapes on a GPU. How many images selective TTA finds unsure depends on the
data, so the views' forward would meet a new batch size in nearly every batch;
with cuDNN autotuning on (dawnbench_fast.execution.gpu_defaults) each new shape is timed
on the spot, inside the final evaluation and so on the time-to-accuracy clock
(and a compiled net would recompile). On CUDA the unsure set is therefore
padded to one of a few fixed sizes (:func:`bucket_sizes`) and the pad's rows
dropped, and :func:`warm_up_selective_pass` runs every shape once, in the
warm-up. The clocked evaluation (:func:`selective_tta_pass`) takes one view
of the whole test set in a few large batches and reads the unsure set's size
once, not once a batch. In eval mode (BN folded) a row's logits depend on that row alone, so
the padding changes no prediction.
"""

from __future__ import annotations

import nvtx
import torch
import torch.nn.functional as F

from dawnbench_fast.training.train import NVTX_DOMAIN

# Level -> the weights of its views (tta_views' order): 1: the image and its
# mirror; 2: that pair at 0.5 plus the mirrored pairs shifted by -1 and +1 px
# (reflect padding) at 0.25.
TTA_WEIGHTS = {0: (1.0,), 1: (0.5, 0.5), 2: (0.25, 0.25, 0.125, 0.125, 0.125, 0.125)}


def added_views(x: torch.Tensor, level: int) -> list[torch.Tensor]:
    """The views that TTA ``level`` (1 or 2) adds to level ``level - 1``'s,
    in TTA_WEIGHTS' order: the mirror at 1; at 2 the image and its mirror
    shifted by -1 and +1 px (reflect padding)."""
    if level == 1:
        return [x.flip(-1)]
    padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
    h, w = x.shape[-2:]
    return [v for shifted in (padded[..., :h, :w], padded[..., 2:, 2:]) for v in (shifted, shifted.flip(-1))]


def tta_views(x: torch.Tensor, level: int) -> list[torch.Tensor]:
    """The test-time augmentation views of a batch, in TTA_WEIGHTS' order."""
    return [x, *(v for k in range(1, level + 1) for v in added_views(x, k))]


def at_least_fp32(dtype: torch.dtype) -> torch.dtype:
    """``dtype``, or fp32 where it is narrower (bf16 logits summed without rounding each view)."""
    return torch.promote_types(dtype, torch.float32)


def tta_logits(model: torch.nn.Module, x: torch.Tensor, level: int,
               first: torch.Tensor | None = None) -> torch.Tensor:
    """The weighted mean of the model's logits over ``x``'s views, all views in
    one forward (one call per image when serving, not one per view). ``first``:
    the logits of the identity view if already computed. The mean in fp32 at
    least: bf16 logits of about 10 are spaced 0.06 apart, and a mean rounded
    to them turns near ties either way."""
    views = tta_views(x, level)
    if len(views) == 1:
        return model(x) if first is None else first
    todo = views if first is None else views[1:]
    with nvtx.annotate("tta_views", domain=NVTX_DOMAIN):  # Nsight names the views' forward
        out = model(torch.cat(todo)).unflatten(0, (len(todo), len(x)))
    out = out.to(at_least_fp32(out.dtype))
    if first is not None:
        out = torch.cat([first.to(out.dtype)[None], out])
    weights = torch.tensor(TTA_WEIGHTS[level], dtype=out.dtype, device=out.device)
    return torch.einsum("v,vnk->nk", weights, out)


def refined_logits(model: torch.nn.Module, x: torch.Tensor, known: torch.Tensor, level: int) -> torch.Tensor:
    """Level ``level``'s TTA logits of ``x`` from ``known``, its logits at
    level ``level - 1``: each level weighs the level below it and the mean
    of the views it adds (:func:`added_views`) equally, which is
    TTA_WEIGHTS. The added views in one forward; the sum in fp32 at least."""
    views = added_views(x, level)
    with nvtx.annotate("tta_views", domain=NVTX_DOMAIN):
        out = model(torch.cat(views)).unflatten(0, (len(views), len(x)))
    dtype = at_least_fp32(out.dtype)
    return 0.5 * known.to(dtype) + 0.5 * out.to(dtype).mean(0)


def eval_batch(eval_batch_size: int, level: int) -> int:
    """Images per evaluation batch at TTA ``level``: their views go through the
    net together, as many rows per forward as ``eval_batch_size`` images of one view."""
    return max(1, eval_batch_size // len(TTA_WEIGHTS[level]))


# Device types on which selective TTA pads the unsure set unless told
# (``pad``): CUDA, where cuDNN autotunes each new shape. Tests add "cpu".
PAD_DEVICES = frozenset({"cuda"})

# The smallest padded size of an unsure set. Below it a GPU forward of these
# small images costs about the same whatever the batch (launch-bound), so
# finer sizes would only add shapes to warm up.
MIN_BUCKET = 8


def bucket_sizes(cap: int) -> tuple[int, ...]:
    """The sizes an unsure set of at most ``cap`` images is padded to: the
    powers of two from :data:`MIN_BUCKET` below ``cap``, then ``cap`` itself
    (so a set never grows past the full batch: at most twice its size)."""
    sizes, m = [], MIN_BUCKET
    while m < cap:
        sizes.append(m)
        m *= 2
    return (*sizes, cap)


def bucket(n: int, cap: int) -> int:
    """The smallest of :func:`bucket_sizes` (``cap``) that holds ``n`` images (``n`` <= ``cap``)."""
    if not 0 < n <= cap:
        raise ValueError(f"unsure set of {n} images: must be 1 to the cap, {cap}")
    return next(m for m in bucket_sizes(cap) if m >= n)


def pad_rows(t: torch.Tensor, size: int) -> torch.Tensor:
    """``t`` grown to ``size`` rows with copies of its first row: real pixels,
    so the pad holds no NaN or denormal that could slow a kernel down."""
    return torch.cat([t, t[:1].expand(size - len(t), *t.shape[1:])])


def _rows(t: torch.Tensor, pick: torch.Tensor, size: int) -> torch.Tensor:
    """``t[pick]``, grown to ``size`` rows with :func:`pad_rows`."""
    rows = t[pick]
    return pad_rows(rows, size) if size > len(pick) else rows


def _unsure_logits(model: torch.nn.Module, x: torch.Tensor, first: torch.Tensor, pick: torch.Tensor,
                   level: int, size: int) -> torch.Tensor:
    """:func:`tta_logits` of the images ``x[pick]``, computed on ``size`` rows
    (``pick`` padded with :func:`pad_rows`) and the pad's rows dropped."""
    hard = _rows(x, pick, size).contiguous(memory_format=torch.channels_last)
    return tta_logits(model, hard, level, first=_rows(first, pick, size))[: len(pick)]


def _refined_rows(model: torch.nn.Module, x: torch.Tensor, known: torch.Tensor, pick: torch.Tensor,
                  at: torch.Tensor, level: int, size: int) -> torch.Tensor:
    """:func:`refined_logits` of the images ``x[pick]`` from ``known[at]``
    (their logits a level below), on ``size`` rows, the pad's rows dropped."""
    hard = _rows(x, pick, size).contiguous(memory_format=torch.channels_last)
    return refined_logits(model, hard, _rows(known, at, size), level)[: len(pick)]


def _padding(x: torch.Tensor, pad: bool | None) -> bool:
    return x.device.type in PAD_DEVICES if pad is None else pad


def selective_tta_logits(model: torch.nn.Module, x: torch.Tensor, level: int, below: float,
                         cap: int | None = None, pad: bool | None = None,
                         shift_below: float = 1.0) -> torch.Tensor:
    """One view for every image; the TTA views (:func:`tta_logits`) only for
    the images whose one-view top probability is below ``below``. A row's
    result depends on that row alone, so batching does not change a prediction.
    ``shift_below`` < 1 at level 2: the cascade (:func:`selective_tta_pass`).

    ``pad`` (default: on CUDA only, :data:`PAD_DEVICES`) pads the unsure set to :func:`bucket`
    (n, ``cap``) rows, ``cap`` being the largest batch the caller passes
    (default, and at least, ``len(x)``): a few fixed shapes for cuDNN's
    autotuning instead of one per count. Off on the CPU, where nothing is
    autotuned and every padded row costs its full compute."""
    whole = max(cap or 0, len(x), 1)  # one batch: the whole of x, its unsure set in one forward
    return selective_tta_pass(model, x, level, below, whole, whole, pad, shift_below)


def chunks(n: int, size: int) -> list[slice]:
    """``range(n)`` in slices of ``size`` (the last one shorter)."""
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def _in_batches(forward, x: torch.Tensor, size: int) -> torch.Tensor:
    """``forward`` over ``x`` in batches of ``size`` rows, concatenated (one
    batch: ``forward(x)`` itself, no copy)."""
    parts = chunks(len(x), size)
    return forward(x) if len(parts) <= 1 else torch.cat([forward(x[s]) for s in parts])


def cascades(level: int, shift_below: float) -> bool:
    """Whether the unsure set's views come in two steps (:func:`selective_tta_pass`)."""
    return level == 2 and shift_below < 1.0


def selective_tta_pass(model: torch.nn.Module, x: torch.Tensor, level: int, below: float, view_batch: int,
                       cap: int, pad: bool | None = None, shift_below: float = 1.0) -> torch.Tensor:
    """:func:`selective_tta_logits` of a whole test set ``x`` as the clocked
    evaluation runs it: one view of every image in batches of ``view_batch``
    (a few large forwards), the unsure set found over all of them with one
    read on the host (its size), then that set's views in batches of at
    most ``cap`` images, each padded to a :func:`bucket` of ``cap`` where
    ``pad`` (default: on CUDA). Each row's logits depend on that row alone,
    so the result is :func:`selective_tta_logits`' on any batching of ``x``
    (tests/cifar/test_tta_shapes.py compares them).

    The cascade (level 2, ``shift_below`` < 1): the unsure set takes its
    mirror first (level 1), and only the images whose two-view top
    probability is still below ``shift_below`` take the four shifted views
    (level 2, :func:`refined_logits`); a second read, the size of that
    subset. An image the mirror makes sure of seldom changes its answer with
    the shifts, which cost four forwards an image."""
    cascade = cascades(level, shift_below)
    if level == 0 or (below >= 1.0 and not cascade):  # every view of every image, ``cap`` images a forward
        return _in_batches(lambda v: tta_logits(model, v, level), x, cap)
    with nvtx.annotate("tta_one_view", domain=NVTX_DOMAIN):
        first = _in_batches(model, x, view_batch)
    if below >= 1.0:  # the cascade for every image: no read
        pick = torch.arange(len(x), device=x.device)
    else:
        pick = (first.float().softmax(1).amax(1) < below).nonzero().squeeze(1)  # the one read of the pass
    if cascade:
        return _cascade(model, x, first, pick, shift_below, cap, pad)
    out = first
    for s in chunks(len(pick), cap):
        part = pick[s]
        views = _unsure_logits(model, x, first, part, level, _size(x, part, cap, pad))
        out = out.to(views.dtype).index_copy(0, part, views)  # a new tensor: first's rows stay as read
    return out


def _size(x: torch.Tensor, part: torch.Tensor, cap: int, pad: bool | None) -> int:
    """The rows a forward of ``part``'s images takes: its :func:`bucket` where padding, else its own."""
    return bucket(len(part), cap) if _padding(x, pad) else len(part)


def _cascade(model: torch.nn.Module, x: torch.Tensor, first: torch.Tensor, pick: torch.Tensor,
             shift_below: float, cap: int, pad: bool | None) -> torch.Tensor:
    """:func:`selective_tta_pass`' two steps for the unsure set ``pick``:
    the mirror for all of it, then the shifted views for those of it whose
    two-view top probability is below ``shift_below``."""
    out = first.to(at_least_fp32(first.dtype), copy=True)  # first's rows stay as read
    if len(pick) == 0:
        return out
    both = torch.cat([_refined_rows(model, x, first, pick[s], pick[s], 1, _size(x, pick[s], cap, pad))
                      for s in chunks(len(pick), cap)])
    out.index_copy_(0, pick, both)
    still = (both.softmax(1).amax(1) < shift_below).nonzero().squeeze(1)  # the second read
    for s in chunks(len(still), cap):
        at = still[s]
        part = pick[at]
        out.index_copy_(0, part, _refined_rows(model, x, both, part, at, 2, _size(x, part, cap, pad)))
    return out


@torch.no_grad()
def warm_up_selective_pass(model: torch.nn.Module, images: torch.Tensor, level: int, below: float,
                           view_batch: int, cap: int, pad: bool | None = None,
                           shift_below: float = 1.0) -> None:
    """Run once every input shape :func:`selective_tta_pass` of ``images``
    can meet, whichever images turn out unsure: the one-view batches (a full
    one and the partial last one), then the views of an unsure set of each
    size it may take: with padding each bucket of ``cap``, without it the
    full ``cap`` (the sizes below it are the data's, autotuned nowhere); in
    the cascade, both of its steps at each of those sizes. The caller's
    autocast applies."""
    cascade = cascades(level, shift_below)
    if level == 0 or (below >= 1.0 and not cascade):
        for n in {len(images[s]) for s in chunks(len(images), cap)}:
            tta_logits(model, images[:n], level)
        return
    for n in {len(images[s]) for s in chunks(len(images), view_batch)}:
        model(images[:n])
    first = model(images[:cap])
    for size in (bucket_sizes(cap) if _padding(images, pad) else (min(cap, len(images)),)):
        pick = torch.arange(min(size, len(first)), device=images.device)  # stands in for the unsure
        rows = size if _padding(images, pad) else len(pick)
        if cascade:
            for step in (1, 2):
                _refined_rows(model, images, first, pick, pick, step, rows)
        else:
            _unsure_logits(model, images, first, pick, level, rows)
