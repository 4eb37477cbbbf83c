"""``--tensorboard``: each epoch's record of the per-epoch log
(dawnbench_fast.reporting.run_log) also as TensorBoard scalars, in ``tensorboard/``
inside the run folder (``tensorboard --logdir runs/cifar10`` shows every run).

Off by default, and tensorboard is no dependency: asked for without the
package, it is a one-line error before any data is read, never a failure
after the training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dawnbench_fast.config.overrides import ConfigError

TENSORBOARD_DIR = "tensorboard"


def check_available() -> None:
    """Raise the one-line ConfigError where ``torch.utils.tensorboard`` cannot be imported."""
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        raise ConfigError("--tensorboard: the tensorboard package is not installed; pip install "
                          "tensorboard (the [tensorboard] extra), or drop --tensorboard") from None


class TensorBoardLog:
    """The records as scalars, step = epoch: ``train/loss``, ``test/top1``,
    ``test/top5``, ``time/clock_seconds``, ``time/wall_seconds``, ``lr/<group>``.
    The folder is made at the first record, like every result file; a resumed
    run drops the events after its checkpoint's epoch (``purge_step``), as
    the JSON-lines log drops its lines."""

    def __init__(self, folder: Path, resume_epochs: int | None = None):
        self.folder = folder
        self.purge_step = None if resume_epochs is None else resume_epochs + 1
        self.writer: Any = None

    def append(self, record: dict) -> None:
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(self.folder), purge_step=self.purge_step)
        scalars = {"train/loss": record["train_loss"], "test/top1": record["top1"],
                   "test/top5": record["top5"], "time/clock_seconds": record["clock_seconds"],
                   "time/wall_seconds": record["wall_seconds"],
                   **{f"lr/{k}": v for k, v in record["lr"].items()}}
        for tag, value in scalars.items():
            if value is not None:  # no evaluation this epoch: no point, rather than a zero
                self.writer.add_scalar(tag, value, record["epoch"])
        self.writer.flush()  # a killed run keeps its scalars, as it keeps its log lines

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
