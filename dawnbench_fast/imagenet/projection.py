"""Time to 93% top-5 on N GPUs, composed from measured parts: the
step's rate on one GPU (step_rate.py), the loader's rate per core, and the
gradient all-reduce (allreduce.py), with the recipe's epochs and sides.

Per training side s, every GPU runs batch b (the batch the step was
measured at; the global batch is N x b) and

    compute   = b / step_rate[s]
    allreduce = allreduce.overlap(...).exposed     (the part the backward does not hide)
    loader    = b / (loader_rate_per_core[s] x cores per GPU)
    step      = max(compute + allreduce, loader)   (GPU: the loader's threads run beside it)
    step      = compute + allreduce + loader       (shared_cores: a CPU device, where the
                                                    loader's threads take the step's cores)

an epoch is its steps (the recipe's epoch rule: full global batches) at its
side's step, and the final evaluation is the val images over N GPUs at the
evaluation's rate. The sum is the time to accuracy; x N x the price per GPU
hour is the cost. The bound of a side is the part whose removal would
shorten its step most (GPU compute, network, loader cores).

The inputs' JSON (its schema: docs/IMAGENET.md, "The projection's inputs")
holds the measurements; the set-up (GPUs, cores, network, epochs, price) is
:class:`Setup`, from the command line. A bad file is an :class:`InputError`
naming the file and the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dawnbench_fast.imagenet import allreduce
from dawnbench_fast.imagenet.recipe import train_resolution
from dawnbench_fast.imagenet.task import Config, net_of
from dawnbench_fast.training.task import epoch_steps

SCHEMA_VERSION = 1
IMAGENET_TRAIN = 1_281_167  # ILSVRC-2012 training images (docs/IMAGENET.md, "The layout")
IMAGENET_VAL = 50_000
# The epochs to 93% top-5: FFCV's ResNet-50 table, 40 epochs -> 93.2% top-5 on 8 x A100
# (32 epochs reach only 92.7%): github.com/libffcv/ffcv-imagenet, README and
# rn50_configs/rn50_40_epochs.yaml (docs/FACTS.md, "ImageNet to 93% top-5").
EPOCHS_TO_93 = 40.0
# Ring bus bandwidths, bytes/s, and where they come from. Ideal link rates: a measured busbw
# (nccl-tests' all_reduce_perf) is lower, so pass your own with --bus-gbytes.
NETWORKS: dict[str, tuple[float, str]] = {
    "nvlink": (450e9, "H100 SXM NVLink 4: 900 GB/s in both directions together (NVIDIA's H100 "
                      "datasheet), 450 GB/s each way; one node"),
    "400g": (50e9, "400 Gb/s per GPU (InfiniBand NDR: one ConnectX-7 port per GPU, as in a DGX H100)"),
    "100g": (12.5e9, "100 Gb/s per GPU (a 100 Gb/s Ethernet or EDR InfiniBand port)"),
}
LATENCY_S = 5e-6  # assumed: per ring hop, between NCCL's few us on NVLink and a network's ~10 us
# Assumed prices, USD per GPU-hour, on demand: no quote, the middle of the early-2026 list
# ranges that price trackers give (H100 SXM $2.49-3.99, A100 80 GB $1.49-2.49 at the GPU
# clouds; hyperscalers above): pass --usd-per-gpu-hour for yours.
USD_PER_GPU_HOUR = {"H100": 3.00, "A100": 2.00}
# Assumed: the cores beside each GPU; a DGX H100 has 2 x 56 cores for its 8 GPUs.
CORES_PER_GPU = 14


class InputError(ValueError):
    """The inputs' JSON is unreadable or lacks a field (one line, naming both)."""


@dataclass
class Setup:
    """What the command line states about the run projected."""

    gpus: int = 8
    gpus_per_node: int = 8  # within a node the ring runs over NVLink
    cores_per_gpu: float = CORES_PER_GPU
    network: str = "400g"  # between nodes: a key of NETWORKS
    bus_bytes_per_s: float | None = None  # overrides the network's (and the inputs') figure
    latency_s: float | None = None  # per ring hop (default: the inputs', else LATENCY_S)
    epochs: float = EPOCHS_TO_93
    epochs_source: str = "FFCV's ResNet-50 table: 40 epochs, 93.2% top-5 on 8 x A100 (docs/FACTS.md)"
    recipe: Config = field(default_factory=Config)  # the sides by epoch (res_ramp); epochs replaced
    train_images: int = IMAGENET_TRAIN
    val_images: int = IMAGENET_VAL
    usd_per_gpu_hour: float = USD_PER_GPU_HOUR["H100"]
    price_source: str = "assumed: the middle of early-2026 on-demand list ranges for an H100 SXM"
    loader_form: str | None = None  # a key of the inputs' loader.forms (default: packed, else the first)
    shared_cores: bool = False  # a CPU device: the loader's threads and the step share the cores


def _need(d: dict, key: str, where: str, path: Path, kind: type | tuple = (int, float)) -> object:
    if not isinstance(d, dict) or key not in d:
        raise InputError(f"{path}: no {where}{key} (docs/IMAGENET.md, \"The projection's inputs\")")
    if not isinstance(d[key], kind) or isinstance(d[key], bool):
        raise InputError(f"{path}: {where}{key} is {d[key]!r}, not the {getattr(kind, '__name__', 'number')} "
                         "expected")
    return d[key]


def _rates(d: dict, where: str, path: Path) -> dict[int, float]:
    out = {}
    for side, rate in d.items():
        number = isinstance(rate, int | float) and not isinstance(rate, bool)
        if not str(side).isdigit() or not number or rate <= 0:
            raise InputError(f"{path}: {where}[{side!r}] = {rate!r}: need a side in px and a rate > 0")
        out[int(side)] = float(rate)
    if not out:
        raise InputError(f"{path}: {where} is empty")
    return out


def read_inputs(path: str | Path) -> dict:
    """The inputs' JSON, checked: step.images_per_s and step.batch_per_gpu
    required, the rest optional; each rate table's keys are sides in px.
    Returned as read, with the parsed tables added: ``step["rates"]`` and
    ``loader_rates`` (form -> side -> rate), both keyed by int sides."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror or e})") from e
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from e
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object")
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise InputError(f"{path}: schema_version {version!r}; this version reads {SCHEMA_VERSION}")
    step = _need(data, "step", "", path, dict)
    _need(step, "batch_per_gpu", "step.", path, int)
    step["rates"] = _rates(_need(step, "images_per_s", "step.", path, dict), "step.images_per_s", path)
    if "eval" in step:
        _need(step["eval"], "images_per_s", "step.eval.", path)
        _need(step["eval"], "side", "step.eval.", path, int)
    forms = _need(data["loader"], "forms", "loader.", path, dict) if "loader" in data else {}
    data["loader_rates"] = {form: _rates(_need(forms, form, "loader.forms.", path, dict),
                                         f"loader.forms.{form}", path) for form in forms}
    if "network" in data:
        _need(data["network"], "bus_gbytes_per_s", "network.", path)
    return data


@dataclass
class SideRow:
    """One training side of the projection."""

    side: int
    epochs: float
    steps: int
    compute_s: float
    allreduce_exposed_s: float
    loader_s: float | None
    step_s: float
    seconds: float
    bound: str


def bound_of(compute_s: float, exposed_s: float, comm_s: float, loader_s: float | None, shared: bool) -> str:
    """The part whose removal would shorten the step most: "gpu" (compute),
    "network" (the all-reduce), "loader cores"."""
    loader = loader_s or 0.0
    join = (lambda a, b: a + b) if shared else max
    step = join(compute_s + exposed_s, loader)
    saving = {"gpu": step - join(comm_s, loader),
              "network": step - join(compute_s, loader),
              "loader cores": step - (compute_s + exposed_s)}
    return max(saving, key=lambda k: saving[k])


def _network(inputs: dict, setup: Setup) -> tuple[float, float, str]:
    """(bus bytes/s, latency s per hop, where they come from) for the ring."""
    net = inputs.get("network", {})
    latency = setup.latency_s if setup.latency_s is not None else net.get("latency_us", LATENCY_S * 1e6) / 1e6
    if setup.bus_bytes_per_s is not None:
        return setup.bus_bytes_per_s, latency, "--bus-gbytes"
    if net:
        return net["bus_gbytes_per_s"] * 1e9, latency, net.get("source", "the inputs' network")
    name = "nvlink" if setup.gpus <= setup.gpus_per_node else setup.network
    bw, source = NETWORKS[name]
    return bw, latency, f"{name}: {source}"


def gradient_buckets(inputs: dict, setup: Setup) -> tuple[list[int], str]:
    """The buckets DDP reduces each step, and the gradients' dtype: the
    inputs' ``gradient.buckets`` (as they are) or ``gradient.bytes`` (cut
    at DDP's caps: allreduce.even_buckets), else the net the step names,
    its parameters bucketed as DDP does (fp32 gradients: DDP reduces the
    parameters' dtype)."""
    grad = inputs.get("gradient", {})
    if "buckets" in grad:
        return [int(b) for b in grad["buckets"]], grad.get("dtype", "float32")
    if "bytes" in grad:
        return allreduce.even_buckets(int(grad["bytes"])), grad.get("dtype", "float32")
    step = inputs["step"]
    cfg = Config(arch=step.get("arch", setup.recipe.arch), width=step.get("width", setup.recipe.width))
    return allreduce.bucket_bytes(allreduce.gradient_bytes(net_of(cfg, step.get("classes", 1000)))), "float32"


def _loader_rates(inputs: dict, setup: Setup) -> tuple[str | None, dict[int, float] | None]:
    forms = inputs["loader_rates"]
    if not forms:
        return None, None
    form = setup.loader_form or ("packed" if "packed" in forms else next(iter(forms)))
    if form not in forms:
        raise InputError(f"--loader-form {form}: the inputs measure {', '.join(forms)}")
    return form, forms[form]


@dataclass
class Projection:
    """The composed time to accuracy, its parts and its inputs."""

    gpus: int
    batch_per_gpu: int
    global_batch: int
    epochs: float
    sides: list[SideRow]
    eval_s: float
    eval_source: str
    train_s: float
    total_s: float
    usd: float
    bound: str  # the bound of the sides that take most of the time
    notes: dict = field(default_factory=dict)  # every input and assumption, by name

    def record(self) -> dict:
        return {**asdict(self), "total_minutes": self.total_s / 60}


def _eval_seconds(inputs: dict, setup: Setup, loader: dict[int, float] | None) -> tuple[float, str]:
    """The final evaluation: the val images over the GPUs at the measured
    evaluation rate (plus, with shared cores, their decoding)."""
    cfg, step = setup.recipe, inputs["step"]
    per_gpu = math.ceil(setup.val_images / setup.gpus)
    if "eval" in step:
        rate, source = step["eval"]["images_per_s"], f"measured at {step['eval']['side']} px"
    else:  # assumed: a forward is a third of a training step (allreduce.BACKWARD_SHARE), x2 with the mirror
        side = max(step["rates"])
        rate = step["rates"][side] * 3 / (2 if cfg.tta else 1) * (side / cfg.val_res) ** 2
        mirror = ", /2 for the mirror" if cfg.tta else ""
        source = f"assumed: 3x the {side}-px training rate{mirror}, scaled by pixels"
    seconds = per_gpu / rate
    if setup.shared_cores and loader and cfg.val_res in loader:
        seconds += per_gpu / (loader[cfg.val_res] * setup.cores_per_gpu)
    return seconds, source


def project(inputs: dict, setup: Setup) -> Projection:
    """Compose the inputs (:func:`read_inputs`) with ``setup`` (module docstring)."""
    step, cfg = inputs["step"], setup.recipe
    batch = step["batch_per_gpu"]
    global_batch = batch * setup.gpus
    if global_batch > setup.train_images:
        raise InputError(f"--gpus {setup.gpus} x batch {batch}: more than the {setup.train_images} images")
    steps_per_epoch = setup.train_images // global_batch
    buckets, dtype = gradient_buckets(inputs, setup)
    bw, latency, net_source = _network(inputs, setup)
    form, loader = _loader_rates(inputs, setup)
    per_epoch = epoch_steps(setup.epochs, lambda e: steps_per_epoch)
    rows: dict[int, SideRow] = {}
    for e, steps in enumerate(per_epoch):
        side = train_resolution(cfg, e)
        if side not in step["rates"]:
            raise InputError(f"the inputs' step.images_per_s has no rate at {side} px (the recipe trains "
                             f"at {sorted({train_resolution(cfg, k) for k in range(len(per_epoch))})} px)")
        if loader is not None and side not in loader:
            raise InputError(f"the inputs' loader.forms.{form} has no rate at {side} px")
        if side not in rows:
            rows[side] = _side(side, batch, step["rates"][side], loader, buckets, bw, latency, setup)
        rows[side].epochs += min(1.0, setup.epochs - e)
        rows[side].steps += steps
    for r in rows.values():
        r.seconds = r.steps * r.step_s
    eval_s, eval_source = _eval_seconds(inputs, setup, loader)
    train_s = sum(r.seconds for r in rows.values())
    total = train_s + eval_s
    grad = allreduce.overlap(buckets, 1.0, setup.gpus, bw, latency)
    notes = {"step": step.get("source", "unstated"), "step_device": step.get("device", "unstated"),
             "epochs": setup.epochs_source,
             "network": net_source if setup.gpus > 1 else "one GPU: no all-reduce",
             "bus_gbytes_per_s": bw / 1e9, "latency_us_per_hop": latency * 1e6,
             "gradient": {"bytes": grad.total_bytes, "dtype": dtype, "buckets": len(buckets)},
             "loader": None if loader is None else {
                 "form": form, "cores_per_gpu": setup.cores_per_gpu,
                 "source": inputs.get("loader", {}).get("source", "unstated")},
             "price": f"${setup.usd_per_gpu_hour:.2f} per GPU-hour, {setup.price_source}",
             "eval": eval_source, "steps_per_epoch": steps_per_epoch, "shared_cores": setup.shared_cores}
    main = max(rows.values(), key=lambda r: r.seconds)
    return Projection(gpus=setup.gpus, batch_per_gpu=batch, global_batch=global_batch, epochs=setup.epochs,
                      sides=sorted(rows.values(), key=lambda r: r.side), eval_s=eval_s,
                      eval_source=eval_source, train_s=train_s, total_s=total,
                      usd=total / 3600 * setup.gpus * setup.usd_per_gpu_hour, bound=main.bound, notes=notes)


def _side(side: int, batch: int, rate: float, loader: dict[int, float] | None, buckets: list[int],
          bw: float, latency: float, setup: Setup) -> SideRow:
    """One side's step: compute, the exposed all-reduce, the loader; no epochs yet."""
    compute = batch / rate
    ov = allreduce.overlap(buckets, compute, setup.gpus, bw, latency)
    loader_s = None if loader is None else batch / (loader[side] * setup.cores_per_gpu)
    gpu_s = compute + ov.exposed_s
    step_s = (gpu_s + (loader_s or 0.0)) if setup.shared_cores else max(gpu_s, loader_s or 0.0)
    return SideRow(side=side, epochs=0.0, steps=0, compute_s=compute, allreduce_exposed_s=ov.exposed_s,
                   loader_s=loader_s, step_s=step_s, seconds=0.0,
                   bound=bound_of(compute, ov.exposed_s, ov.comm_s, loader_s, setup.shared_cores))


def render(p: Projection) -> str:
    """The projection as the command prints it."""
    lines = [f"projected time to accuracy on {p.gpus} GPU(s), batch {p.batch_per_gpu} per GPU "
             f"(global {p.global_batch}), {p.epochs:g} epochs:",
             "  side  epochs  steps  compute ms  all-reduce ms  loader ms  step ms  seconds  bound"]
    for r in p.sides:
        loader = "-" if r.loader_s is None else f"{1e3 * r.loader_s:.1f}"
        lines.append(f"  {r.side:4d}  {r.epochs:6g}  {r.steps:5d}  {1e3 * r.compute_s:10.1f}  "
                     f"{1e3 * r.allreduce_exposed_s:13.2f}  {loader:>9}  {1e3 * r.step_s:7.1f}  "
                     f"{r.seconds:7.1f}  {r.bound}")
    lines += [f"  final evaluation: {p.eval_s:.1f} s ({p.eval_source})",
              f"time to accuracy: {p.total_s / 60:.1f} min ({p.total_s:.0f} s); cost ${p.usd:.2f}; "
              f"bound: {p.bound}", "inputs and assumptions:"]
    lines += [f"  {k}: {v}" for k, v in p.notes.items()]
    return "\n".join(lines)
