"""CIFAR-10 on the device: the data a run needs, read once and placed in
(device) memory before the clock starts (DAWNBench allows reading, decoding,
normalising and padding the data once outside it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.data import augment as aug
from dawnbench_fast.data.cifar10 import MEAN, STD, Cifar10, subset_problem


@dataclass
class DeviceData:
    """Everything a run needs, already in (device) memory."""

    padded: torch.Tensor  # uint8 NHWC, reflect-padded by cfg.translate
    train_labels: torch.Tensor
    test_x: torch.Tensor  # normalised float, channels_last
    test_labels: torch.Tensor
    whiten_x: torch.Tensor  # normalised, unaugmented training images for init
    scale: torch.Tensor
    shift: torch.Tensor


def prepare_data(ds: Cifar10, cfg: Any, device: torch.device) -> DeviceData:
    """Place the (sub)sets on ``device`` once, outside the clock: the training
    images as uint8 reflect-padded by ``cfg.translate`` (augmentation crops
    from them), the test images and ``cfg.whiten_images`` training images
    normalised. ``cfg`` is the recipe's config (subset, eval_subset,
    translate, whiten_images)."""
    n = cfg.subset or len(ds.train_images)
    m = cfg.eval_subset or len(ds.test_images)
    if (problem := subset_problem(ds, n, m)) is not None:
        raise ConfigError(problem)
    scale_np, shift_np = aug.normalisation(MEAN, STD)
    scale, shift = torch.from_numpy(scale_np), torch.from_numpy(shift_np)

    def normalise(u8: np.ndarray) -> torch.Tensor:
        x = torch.from_numpy(u8).to(device).float() * scale.to(device) + shift.to(device)
        return x.permute(0, 3, 1, 2)  # channels_last memory

    train = ds.train_images[:n]
    return DeviceData(
        padded=torch.from_numpy(aug.pad_reflect(train, cfg.translate)).to(device),
        train_labels=torch.from_numpy(ds.train_labels[:n]).to(device),
        test_x=normalise(ds.test_images[:m]),
        test_labels=torch.from_numpy(ds.test_labels[:m]).to(device),
        whiten_x=normalise(train[: cfg.whiten_images]),
        scale=scale.to(device),
        shift=shift.to(device),
    )
