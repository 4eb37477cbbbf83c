"""ImageNet's command line: ``python -m dawnbench_fast.imagenet --data-dir DIR``
(DIR/train and DIR/val as ImageFolders, or their packs), also under torchrun:

    torchrun --nproc-per-node 8 -m dawnbench_fast.imagenet --data-dir DIR

Every flag the trainers share comes from dawnbench_fast.runner.cli and the run itself
from dawnbench_fast.runner.command; this module holds ImageNet's own flags,
how its config and recipe description are built, and the DAWNBench model name.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

from dawnbench_fast.config import config_file
from dawnbench_fast.data.cifar10 import DataError
from dawnbench_fast.data.imagenet.jpeg_turbo import DECODERS
from dawnbench_fast.execution import gpu_defaults
from dawnbench_fast.execution.distributed import world
from dawnbench_fast.imagenet import project_cli
from dawnbench_fast.imagenet.recipe import RECIPES, apply_overrides, validate
from dawnbench_fast.imagenet.task import (
    Config,
    ImageNetData,
    ImageNetTask,
    load_data,
    resolve_kernels,
    save_model,
)
from dawnbench_fast.runner import cli, command
from dawnbench_fast.runner.command import TaskCommand
from dawnbench_fast.runner.runs import Recipe

PROG = project_cli.PROG
ERRORS = (*cli.USER_ERRORS, DataError)  # one line on stderr and exit 2, never a traceback
KERNELS = ("auto", "torch")  # the --kernels choices that can work here (resolve_kernels)


def model_name(cfg: Config) -> str:
    """The DAWNBench model field: ResNet-50-v1.5, ResNet-18 (plus width and BlurPool)."""
    name = {"resnet50": "ResNet-50-v1.5", "resnet101": "ResNet-101-v1.5"}.get(
        cfg.arch, cfg.arch.replace("resnet", "ResNet-"))
    return name + (f"-w{cfg.width}" if cfg.width != 64 else "") + ("-blurpool" if cfg.blurpool else "")


def build_parser() -> argparse.ArgumentParser:
    p = cli.OneLineParser(
        prog=PROG,
        description="Train a ResNet on ImageNet to --target top-5 validation accuracy and write a "
        "DAWNBench report (time-to-accuracy, cost, one-image latency, TSV + JSON). Under torchrun "
        "every process trains its share of each global batch; rank 0 writes. Also `project` and "
        "`measure` as the first word: the time to 93%% top-5 on N GPUs projected from measured parts "
        "(docs/IMAGENET.md, \"The projection\").",
        formatter_class=cli.HelpFormatter,
    )
    cli.add_version_arg(p)
    d = Config()
    g = p.add_argument_group("data")
    g.add_argument("--data-dir", help="folder holding train/ and val/ ImageFolders "
                   "(<split>/<synset>/<image>), or train.pack and val.pack (docs/IMAGENET.md)")
    g.add_argument("--decoder", choices=DECODERS, default=None,
                   help=f"JPEG decoder (default: the recipe's; {d.decoder} for the default recipe): pil "
                   "(Pillow), or simplejpeg (libjpeg-turbo, faster; pip install 'dawnbench-fast[jpeg]')")
    g.add_argument("--no-preflight", action="store_true",
                   help="skip the pre-flight: after the warm-up, the loader timed for "
                   f"{d.preflight_seconds:g} s against the steps it must feed (--set preflight_seconds=S)")
    cli.add_training_args(p, d, set_example="lr_per_256=0.125")
    p.add_argument("--recipe", choices=sorted(RECIPES), default="dawnbench_fast",
                   help="named recipe: dawnbench_fast (ours: FFCV's ResNet-50 at 40 epochs, Nesterov, "
                   "batch 1024), ffcv_rn50_40 / ffcv_rn50_16 (FFCV's 8-GPU configs, batch 4096), "
                   "ffcv_rn18_16 (FFCV's one-GPU ResNet-18); --epochs and --set apply on top")
    cli.add_execution_args(p, d, kernels=(KERNELS, "torch only (auto means torch): the ResNet uses no op of "
                                          "the kernel catalogue, whose backends serve the CIFAR net"))
    cli.add_report_args(p, out="runs/imagenet")
    return p


def config_from_args(args: argparse.Namespace) -> Config:
    if args.config is not None:
        cfg = config_file.from_file(args, Config, validate)
    else:
        cfg = Config(**config_file.recipe_fields(args, RECIPES))
    return apply_overrides(dataclasses.replace(cfg, **loader_fields(args)), args.set)


def loader_fields(args: argparse.Namespace) -> dict:
    """The fields ImageNet's own data flags set (only those given: with
    --config the file's values stand otherwise)."""
    out: dict = {"decoder": args.decoder} if args.decoder is not None else {}
    if args.no_preflight:
        out["preflight_seconds"] = 0.0
    return out


def recipe(cfg: Config, data: ImageNetData, device: torch.device, backend: str,
           args: argparse.Namespace) -> Recipe:
    """The recipe as the seed driver (dawnbench_fast.runner.runs) sees it."""
    return Recipe(
        entry="dawnbench_fast.imagenet", dataset="ImageNet", model_name=model_name(cfg),
        make_task=lambda cfg: ImageNetTask(cfg, data, device, args.latency_images),
        misc=lambda cfg, backend: {
            "optimizer": f"SGD, momentum {cfg.momentum}{' (Nesterov)' if cfg.nesterov else ''}, "
                         f"weight decay {cfg.weight_decay} (none on BN and biases)",
            "schedule": f"linear warm-up over {cfg.warmup_epochs} epochs to lr {cfg.peak_lr:g}, then linear "
                        f"to 0 at {cfg.epochs} epochs (FFCV's), global batch {cfg.batch_size}",
            "resolution": f"train {cfg.min_res}->{cfg.max_res} px (ramp epochs {cfg.res_ramp[0]}-"
                          f"{cfg.res_ramp[1]}), val {cfg.val_res} px", "model": model_name(cfg),
            "precision": cfg.precision, "kernels": backend, "seed": cfg.seed, "tta": cfg.tta,
            "world_size": world().size, "sync_bn": cfg.sync_bn and world().distributed,
            "compile": gpu_defaults.compile_enabled(cfg.compile, device),
        },
        data={"root": str(data.root), "train_images": len(data.train), "val_images": len(data.val),
              "classes": data.classes, "decoder": cfg.decoder, "top5_k": min(5, data.classes)},
        extra_result=lambda task, backend: {"loader_preflight": data.preflight},
        save_model=lambda task, cfg, path: save_model(task.net, cfg, path, data.classes),
        target_metric="top5", ops=[],
    )


COMMAND = TaskCommand(
    config_from_args=lambda args: config_from_args(args),
    resolve_backend=lambda cfg, device: resolve_kernels(cfg.kernels),
    load_data=lambda cfg, device, w: load_data(cfg.data_dir, cfg.decoder),
    make_task=lambda cfg, data, device, backend: ImageNetTask(cfg, data, device),
    recipe=recipe,
)


def main(argv: list[str] | None = None) -> int:
    """Train; or, with ``project`` or ``measure`` first, the projection's
    commands (project_cli.py: time to accuracy on N GPUs from measured parts)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in project_cli.COMMANDS:
        return project_cli.main(argv)
    return cli.guarded(PROG, lambda: command.run(COMMAND, config_file.parse_args(build_parser(), argv)),
                       ERRORS)


if __name__ == "__main__":
    sys.exit(main())
