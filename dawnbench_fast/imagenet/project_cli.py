"""``python -m dawnbench_fast.imagenet project`` and ``... measure``: the
projection's command line (projection.py composes, docs/IMAGENET.md
says how to read and check it).

    python -m dawnbench_fast.imagenet measure --out inputs.json [--data-dir DIR] [--device cuda]
    python -m dawnbench_fast.imagenet project --from inputs.json --gpus 8 [--json out.json]

``measure`` writes the inputs' JSON from this machine: the step on the device
(step_rate.py, synthetic batches), with ``--data-dir`` the loader's rate per
core on DIR's training split (loader_rate.py), with ``--allreduce`` under
torchrun the all-reduce's bus bandwidth and latency (allreduce.py). ``project`` composes a
file of that schema, a user's own measurements or a GPU suite's, with the
set-up given here. A bad flag or file is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

from dawnbench_fast import atomic
from dawnbench_fast.config.overrides import ConfigError
from dawnbench_fast.config.precision import with_resolved_precision
from dawnbench_fast.data.cifar10 import DataError
from dawnbench_fast.execution.distributed import init_from_env, world
from dawnbench_fast.execution.runtime import configure_process, resolve_device
from dawnbench_fast.imagenet import allreduce, loader_rate, projection, step_rate
from dawnbench_fast.imagenet.recipe import RECIPES, apply_overrides
from dawnbench_fast.imagenet.task import Config, split_path
from dawnbench_fast.runner import cli

PROG = "python -m dawnbench_fast.imagenet"
ERRORS = (*cli.USER_ERRORS, DataError, projection.InputError)


def _positive(kind: type):
    def parse(text: str):
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text}: must be > 0")
        return value
    return parse


def _sides(text: str) -> list[int]:
    try:
        sides = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: not sides in px, comma-separated (160,192)") from None
    if min(sides) < 16:
        raise argparse.ArgumentTypeError(f"{text}: every side must be >= 16 px")
    return sides


def project_parser() -> argparse.ArgumentParser:
    s = projection.Setup()
    p = cli.OneLineParser(prog=f"{PROG} project", formatter_class=cli.HelpFormatter,
                          description="Project the time and cost to 93% top-5 on N GPUs from measured parts "
                          "(docs/IMAGENET.md, \"The projection\").")
    p.add_argument("--from", dest="inputs", required=True, metavar="FILE",
                   help="the inputs' JSON: the step's rate per GPU, optionally the loader's per core, the "
                   "network, the gradient (written by `measure` or by hand: docs/IMAGENET.md)")
    p.add_argument("--gpus", type=_positive(int), default=s.gpus, help="GPUs in the run")
    p.add_argument("--gpus-per-node", type=_positive(int), default=s.gpus_per_node,
                   help="GPUs joined by NVLink; more GPUs than this use --network")
    p.add_argument("--cores-per-gpu", type=_positive(float), default=s.cores_per_gpu,
                   help="CPU cores feeding each GPU's loader (assumed: a DGX H100's 112 cores / 8)")
    p.add_argument("--network", choices=sorted(projection.NETWORKS), default=s.network,
                   help="between nodes (the ring's bus bandwidth: the link rate; sources in projection.py)")
    p.add_argument("--bus-gbytes", type=_positive(float), default=None, metavar="GB/S",
                   help="the ring's bus bandwidth in GB/s (e.g. nccl-tests' all_reduce_perf busbw); "
                   "overrides --network and the inputs' network")
    p.add_argument("--latency-us", type=_positive(float), default=None,
                   help=f"per ring hop (default: the inputs', else {projection.LATENCY_S * 1e6:g}, assumed)")
    p.add_argument("--epochs", type=_positive(float), default=s.epochs,
                   help="epochs to 93%% top-5 (default: FFCV's ResNet-50 table, 40 epochs -> 93.2%%)")
    p.add_argument("--recipe", choices=sorted(RECIPES), default="dawnbench_fast",
                   help="whose resolution schedule the epochs follow")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a field of that recipe (its sides: min_res, max_res, res_ramp, val_res; "
                   "tta)")
    p.add_argument("--train-images", type=_positive(int), default=s.train_images)
    p.add_argument("--val-images", type=_positive(int), default=s.val_images)
    p.add_argument("--usd-per-gpu-hour", type=_positive(float), default=s.usd_per_gpu_hour,
                   help="price (assumed: mid early-2026 on-demand H100 SXM list ranges; give yours)")
    p.add_argument("--loader-form", default=None, help="which of the inputs' loader.forms feeds the GPUs "
                   "(default: packed, if measured)")
    p.add_argument("--shared-cores", action="store_true",
                   help="the loader and the step share the cores (a CPU device): their times add")
    p.add_argument("--json", metavar="FILE", help="also write the projection as JSON")
    return p


def setup_from_args(args: argparse.Namespace) -> projection.Setup:
    default = projection.Setup()
    # the learning rate's warm-up takes no time of its own: 0, so that a short --epochs passes the checks
    recipe = dataclasses.replace(Config(**RECIPES[args.recipe]), epochs=args.epochs, warmup_epochs=0)
    recipe = apply_overrides(recipe, args.set)
    price = default.price_source if args.usd_per_gpu_hour == default.usd_per_gpu_hour \
        else "--usd-per-gpu-hour"
    epochs_source = default.epochs_source if args.epochs == default.epochs else "--epochs"
    return projection.Setup(
        gpus=args.gpus, gpus_per_node=args.gpus_per_node, cores_per_gpu=args.cores_per_gpu,
        network=args.network, bus_bytes_per_s=None if args.bus_gbytes is None else args.bus_gbytes * 1e9,
        latency_s=None if args.latency_us is None else args.latency_us / 1e6, epochs=args.epochs,
        epochs_source=epochs_source, recipe=recipe, train_images=args.train_images,
        val_images=args.val_images, usd_per_gpu_hour=args.usd_per_gpu_hour, price_source=price,
        loader_form=args.loader_form,
        shared_cores=args.shared_cores)


def run_project(argv: list[str]) -> int:
    args = project_parser().parse_args(argv)
    inputs = projection.read_inputs(args.inputs)
    result = projection.project(inputs, setup_from_args(args))
    print(projection.render(result))
    if args.json:
        atomic.write_json(Path(args.json), result.record())
    return 0


def measure_parser() -> argparse.ArgumentParser:
    p = cli.OneLineParser(prog=f"{PROG} measure", formatter_class=cli.HelpFormatter,
                          description="Measure the projection's inputs on this machine: the training step "
                          "on --device (synthetic batches, no data), the loader per core with --data-dir.")
    p.add_argument("--out", required=True, metavar="FILE", help="the inputs' JSON to write")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--arch", default="resnet50", choices=("resnet18", "resnet50"))
    p.add_argument("--width", type=_positive(int), default=64)
    p.add_argument("--batch", type=_positive(int), default=256, help="the batch per GPU")
    p.add_argument("--sides", type=_sides, default=None,
                   help="training sides in px, comma-separated (default: the recipe's)")
    p.add_argument("--steps", type=_positive(int), default=10, help="timed steps per side")
    p.add_argument("--warmup", type=_positive(int), default=3,
                   help="untimed steps first, per side (compile, kernel choice, the allocator's growth)")
    p.add_argument("--profile-steps", type=int, default=0,
                   help="CUDA: profile this many more steps per side for the kernel time and idle share")
    p.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp16", "fp32"))
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the step (default: on CUDA only, as the trainer)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a recipe field (e.g. val_res=224, tta=false, blurpool=false)")
    p.add_argument("--classes", type=_positive(int), default=1000, help="the head's classes")
    p.add_argument("--eval-batch", type=int, default=None,
                   help="the evaluation's batch per GPU (default: --batch; 0: no evaluation timed)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads for PyTorch (0 = all cores)")
    p.add_argument("--data-dir", default=None, help="also time the loader per core on DIR's train split")
    p.add_argument("--loader-seconds", type=_positive(float), default=3.0, help="per side and form")
    p.add_argument("--decoder", default="pil", choices=("pil", "simplejpeg"))
    p.add_argument("--allreduce", action="store_true",
                   help="under torchrun (2 or more processes): also time the all-reduce at 4 KiB, 1 MiB and "
                   "25 MiB and fit the ring's bus bandwidth and latency (the inputs' network)")
    return p


def measure_network(device: torch.device) -> tuple[dict, torch.device]:
    """The inputs' ``network`` from this torchrun job's all-reduce (every
    rank), and the device this rank was given (CUDA: GPU ``LOCAL_RANK``)."""
    w, device = init_from_env(device)
    if w.size < 2:
        raise ConfigError("--allreduce: run under torchrun with 2 or more processes "
                          "(torchrun --nproc-per-node 8 -m dawnbench_fast.imagenet measure --allreduce ...)")
    points = allreduce.time_ring([4096, allreduce.FIRST_BUCKET_BYTES, allreduce.BUCKET_CAP_BYTES], device)
    bw, latency = allreduce.fit_ring(points, w.size)
    network = {"bus_gbytes_per_s": bw / 1e9, "latency_us": latency * 1e6, "ranks": w.size,
               "backend": w.backend, "points": [{"bytes": b, "seconds": s} for b, s in points],
               "source": f"measured: {w.backend} all-reduce over {w.size} processes, the ring's fit"}
    return network, device


def run_measure(argv: list[str]) -> int:
    args = measure_parser().parse_args(argv)
    device = resolve_device(args.device)
    configure_process(args.threads)  # threads and the allocator as a trainer sets them up
    network = None
    if args.allreduce:
        network, device = measure_network(device)
    if world().rank != 0:  # the other ranks only joined the all-reduce
        return 0
    compile_choice = {None: "auto", True: "on", False: "off"}[args.compile]
    cfg = apply_overrides(Config(arch=args.arch, width=args.width, precision=args.precision,
                                 compile=compile_choice), args.set)
    cfg, _ = with_resolved_precision(cfg, device)
    sides = args.sides
    step = step_rate.measure_sides(cfg, args.batch, device, sides, eval_batch=args.eval_batch,
                                   steps=args.steps, warmup=args.warmup, classes=args.classes,
                                   profile_steps=args.profile_steps)
    out: dict = {"schema_version": projection.SCHEMA_VERSION, "step": step}
    if network is not None:
        out["network"] = network
    if args.data_dir is not None:
        source = split_path(args.data_dir, "train")
        form = "packed" if source.suffix == ".pack" else "folder"
        out["loader"] = loader_rate.measure_forms({form: source}, sides or step_rate.recipe_sides(cfg),
                                                  args.loader_seconds, args.decoder)
    atomic.write_json(Path(args.out), out)
    print(f"inputs written to {args.out}", file=sys.stderr)
    return 0


COMMANDS = {"project": run_project, "measure": run_measure}


def main(argv: list[str]) -> int:
    """``argv[0]`` names the command (a key of :data:`COMMANDS`)."""
    command = COMMANDS[argv[0]]
    return cli.guarded(f"{PROG} {argv[0]}", lambda: command(argv[1:]), ERRORS)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
