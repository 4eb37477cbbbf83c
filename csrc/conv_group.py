"""The ``conv_group`` op's CPU face, registered for ``--kernels cpu``: oneDNN
3x3 convolutions whose weight-gradient method is chosen per layer shape,
and, after the first conv, the fused max-pool + BN + activation of
csrc/bn_act.py (``pool_bn_act``) where the group's ``bn_act`` is this
backend's. Other faces: the reference
:func:`dawnbench_fast.layer_ops.conv_group` (backend ``torch``), Triton
kernels/conv_group.py; no CUDA C++ one (dispatch.CATALOGUE says why). Tests:
tests/ops/test_conv_group.py, tests/ops/test_conv_group_wgrad*.py. Costs:
csrc/conv_group_costs.py.

Weight-gradient methods for dW (Cout x Cin*9):
- ``dpbf16``: our AVX-512 BF16 kernel (csrc/conv_group_wgrad.py over
  csrc/conv_group_wgrad_cpu.cpp): bf16 in, fp32 sums, the border taps
  skipped rather than multiplied by padding;
- ``aten``: torch's convolution_backward in the input dtype;
- ``fp32``: torch's convolution_backward on fp32 copies of x and dY;
- ``im2col``: dY^T (Cout x BHW) @ im2col(x) (BHW x Cin*9), bf16 in, fp32 accumulate;
- ``amx``: our Intel AMX kernel (csrc/conv_group_wgrad.py over
  csrc/conv_group_wgrad_amx_cpu.cpp): one tile GEMM per tap over the rows
  of the images laid end to end with a zero row and column each, bf16 in,
  fp32 sums.

Our kernel has a variant for the conv whose output feeds a 2x2 max-pool
(each group's first conv): dY then has one nonzero per pool window and
channel, and ``dpbf16``'s variant sums only those (csrc/conv_group_wgrad.py).
The default policy runs it there; a forced method (``DAWNBENCH_WGRAD``,
``FORCE``) runs as named, without it.

The data gradient before each 2x2 max-pool is csrc/conv_group_dgrad.py's
sparse kernel by default (``DAWNBENCH_DGRAD=aten`` or the recipe's
``conv_dgrad=aten``: oneDNN's dense one there too); oneDNN's elsewhere.
The first conv and the fused pool + BN + act run as one autograd node
(:class:`ConvPoolBnAct`), so that both before-pool kernels read the pool's
own gradient and argmax codes, never a full-size dY (the same bits; -3.5%
of the step on Zen 4, docs/PERFORMANCE.md).

The default, never timed: ``dpbf16`` wherever it applies (bf16, output
channels a multiple of 16, a CPU with AVX-512 BF16) unless oneDNN has AMX
tiles; where the CPU and OS give AMX tiles, ``amx`` on maps of at most
``conv_group_wgrad.AMX_KERNEL_MAX_PIXELS`` (7x7); else ``im2col`` on maps of at most
``AMX_IM2COL_MAX_PIXELS`` where oneDNN has AMX; else ``aten``. On AVX-512 BF16
alone (AMD EPYC family 25 model 17, Zen 4) dpbf16 measured 1.14-2.3x faster
than oneDNN's on every conv of the net; on a Xeon with AMX, oneDNN's weight
gradient is 1.3-7x faster than it, and ours on AMX tiles 3.0x (7x7) and 4.9x
(3x3) faster than oneDNN's (per-round times over the forward's, one run;
docs/PERFORMANCE.md).
Why fixed and not timed: a choice timed once and cached was poisoned by a
loaded spell (oneDNN's bf16 weight gradient of 64->256 channels at 15x15 took
2.0 s with 2 threads against 0.43 s with 1 under load; the cached ``fp32``
for that shape then cost 0.99 s a step in situ against aten's 0.44 s, and
the whole step ran 5.43 s against 4.70 s). Fixed kernels also make the same
seed run the same kernels on every machine of a class.

``DAWNBENCH_WGRAD`` (or :func:`set_wgrad_policy`): unset for the default, a
method name to force it everywhere, ``auto`` (opt-in: each choice made once
per (CPU model, threads, torch version, x shape, w shape, dtype), every
method that applies timed ``REPS`` times interleaved, median; another method
replaces the default only when it is more than ``MARGIN`` faster; saved to
``<cache>/conv_wgrad_methods.json``: ``$DAWNBENCH_CACHE``, else
``$XDG_CACHE_HOME/dawnbench_fast``, else ``~/.cache/dawnbench_fast``; atomic
write; a one-line note on stderr when measured), or ``frozen`` (the cache's
choice, else the default; never measures, e.g. for ``--deterministic``).
:func:`chosen_methods` lists the choices made in this process (run.json),
:func:`wgrad_decisions` with their source and times.
"""

from __future__ import annotations

import fcntl
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from dawnbench_fast.csrc import conv_group_dgrad as dgrad
from dawnbench_fast.csrc import conv_group_wgrad as wgrad
from dawnbench_fast.csrc.bn_act import (
    FUSED_DTYPES,
    bn_act,
    bn_module_args,
    pool_bn_act,
    pool_bn_act_bwd,
    pool_bn_act_fwd,
    update_running_stats,
)
from dawnbench_fast.dispatch import register
from dawnbench_fast.hardware.machine import cpu_model, user_cache_dir
from dawnbench_fast.layer_ops import bn_act as reference_bn_act
from dawnbench_fast.vocabulary import WGRAD_METHODS, WGRAD_POLICIES

DEFAULT_METHOD = "aten"  # where none of our kernels applies (default_method)
# Where oneDNN runs bf16 on AMX tiles, its weight gradient on maps of this many pixels or fewer
# (the 3x3 maps of the last group) took 4-8x its forward's time for the same FLOPs; one GEMM of
# the input's nine shifted copies (im2col) took 24-28 ms against 90-111 ms at 256->256 @3, batch
# 1536 (family 6 model 207, 2026-11-26, interleaved). At 7x7 the two were even: the rule stops there.
AMX_IM2COL_MAX_PIXELS = 16
BACKEND_METHODS = ("dpbf16", "amx")  # our kernels (_KERNELS), not torch's
REPS = 5  # timed calls per method (medians); methods 1.5x slower than the best stop after one
MARGIN = 0.10  # another method must beat the default's median by this fraction
CACHE_VERSION = 1
# (x shape, w shape, dtype) -> {"method", "source", "times"}: this process's choices.
_CHOICE: dict[tuple, dict] = {}
# Forced method for tests and benchmarks (None = the policy decides).
FORCE: str | None = None
_POLICY: list[str] = []  # set_wgrad_policy's value; empty: DAWNBENCH_WGRAD or the default


# Our kernels, in the default's order of preference: name -> (fn(x, g, w),
# applies(x, w), preferred(x, w)): applies = the kernel can run it; preferred =
# the default runs it.
_KERNELS: dict[str, tuple[Callable, Callable, Callable]] = {
    "dpbf16": (wgrad.conv3x3_wgrad, wgrad.applies, wgrad.preferred),
    "amx": (wgrad.conv3x3_wgrad_amx, wgrad.amx_applies, wgrad.amx_preferred)}
# name -> fn(x, g, w) for dY from a 2x2 max-pool.
_BEFORE_POOL: dict[str, Callable] = {"dpbf16": wgrad.conv3x3_wgrad_pooled}
_BEFORE_POOL_RAN: set[tuple] = set()  # (x shape, w shape, dtype) where it ran: run.json
# False: the unfused max-pool and bn_act (benchmarks compare the two).
FUSED_POOL = True
# False: the first conv and the fused pool + BN + act as two autograd nodes,
# the full-size dY between them (ConvPoolBnAct says why one; tests compare).
POOL_HANDOFF = True


def _wgrad_aten(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.convolution_backward(
        g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False]
    )[1]


def _wgrad_fp32(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return _wgrad_aten(x.float(), g.float(), w.float()).to(w.dtype)


def _wgrad_im2col(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """dW as one GEMM: dY^T (Cout x NHW) times the input's nine shifted NHWC
    copies side by side (NHW x 9 Cin, (kh, kw, Cin) order). The shifted copies
    are stacked slices of the padded map: 2.5x faster than Tensor.unfold's
    strided gather on an AMX Xeon at 256 -> 256 @3 (28 against 71 ms)."""
    n, cin, h, wd = x.shape
    cout = w.shape[0]
    xh = F.pad(x.permute(0, 2, 3, 1), (0, 0, 1, 1, 1, 1))  # N, H+2, W+2, Cin
    cols = torch.stack([xh[:, i:i + h, j:j + wd, :] for i in range(3) for j in range(3)], dim=3)
    gh = g.permute(0, 2, 3, 1).reshape(n * h * wd, cout)
    dw = gh.T @ cols.reshape(n * h * wd, 9 * cin)
    return dw.view(cout, 3, 3, cin).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)


# dpbf16 raises a one-line ValueError where the kernel cannot run (forced there).
_METHODS = {"aten": _wgrad_aten, "fp32": _wgrad_fp32, "im2col": _wgrad_im2col,
            "dpbf16": wgrad.conv3x3_wgrad, "amx": wgrad.conv3x3_wgrad_amx}


def default_method(x: torch.Tensor, w: torch.Tensor) -> str:
    """The method the default policy runs for this shape and dtype."""
    for name, (_, _, preferred) in _KERNELS.items():
        if preferred(x, w):
            return name
    return "im2col" if _small_map_on_amx(x) else DEFAULT_METHOD


def _small_map_on_amx(x: torch.Tensor) -> bool:
    """A bf16 CPU map of at most AMX_IM2COL_MAX_PIXELS where oneDNN has AMX."""
    return (x.dtype == torch.bfloat16 and x.device.type == "cpu" and x.dim() == 4
            and x.shape[2] * x.shape[3] <= AMX_IM2COL_MAX_PIXELS and wgrad.onednn_has_amx())


def applicable_methods(x: torch.Tensor, w: torch.Tensor) -> list[str]:
    """The methods ``auto`` times for this shape: torch's always, ours where it applies."""
    return [k for k in _METHODS if k not in BACKEND_METHODS or (k in _KERNELS and _KERNELS[k][1](x, w))]


# ----------------------------------------------------------------------------- policy
def set_wgrad_policy(policy: str | None) -> None:
    """``auto``, ``frozen`` or a method name for the rest of this process
    (None: back to ``DAWNBENCH_WGRAD``, unset: the default)."""
    if policy is not None and policy not in WGRAD_POLICIES:
        raise ValueError(f"wgrad policy must be one of {', '.join(WGRAD_POLICIES)}, not {policy!r}")
    _POLICY[:] = [] if policy is None else [policy]


def wgrad_policy() -> str:
    """``default`` (nothing asked), or what set_wgrad_policy or DAWNBENCH_WGRAD asked for."""
    policy = (_POLICY[0] if _POLICY else os.environ.get("DAWNBENCH_WGRAD", "")) or "default"
    if policy != "default" and policy not in WGRAD_POLICIES:
        raise ValueError(f"DAWNBENCH_WGRAD must be one of {', '.join(WGRAD_POLICIES)}, not {policy!r}")
    return policy


def cache_path() -> Path:
    return user_cache_dir() / "conv_wgrad_methods.json"


def _cache_key(x: torch.Tensor, w: torch.Tensor) -> str:
    return (f"v{CACHE_VERSION}|{cpu_model()}|threads={torch.get_num_threads()}|"
            f"torch={torch.__version__}|x={list(x.shape)}|w={list(w.shape)}|"
            f"{str(x.dtype).replace('torch.', '')}")


def _read_cache() -> dict:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _write_cache(key: str, entry: dict) -> None:
    """Merge one decision into the cache file: read-modify-write under a lock,
    then an atomic rename, so concurrent runs never see half a file."""
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = _read_cache()
            data[key] = entry
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            os.replace(tmp, path)
    except OSError as e:  # a read-only home must not stop training
        print(f"conv_group: could not save the weight-gradient choice ({e})", file=sys.stderr)


def measure_wgrad(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> dict:
    """Median seconds of each method that applies over REPS interleaved calls
    (a method more than 1.5x slower than the best after the first round stops
    there), and the choice: the default unless another beats it by more than MARGIN."""
    methods = {name: _METHODS[name] for name in applicable_methods(x, w)}
    incumbent = default_method(x, w)
    times: dict[str, list[float]] = {name: [] for name in methods}
    for fn in methods.values():
        fn(x, g, w)  # warm-up: oneDNN primitive creation, first-touch pages
    for rep in range(REPS):
        for name, fn in methods.items():
            if rep and min(times[name]) > 1.5 * min(min(v) for v in times.values()):
                continue
            t0 = time.perf_counter()
            fn(x, g, w)
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(v) for name, v in times.items()}
    best = min(med, key=med.get)
    method = best if med[best] < (1.0 - MARGIN) * med[incumbent] else incumbent
    return {"method": method, "median_s": {k: round(v, 6) for k, v in med.items()},
            "reps": REPS, "at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def choose_wgrad(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> str:
    """The method for this shape: forced, else this process's, else the
    cache's (policies ``auto``, ``frozen``), else (``auto``) measured now and saved."""
    if FORCE is not None:
        return FORCE
    key = (tuple(x.shape), tuple(w.shape), x.dtype)
    if key in _CHOICE:
        return _CHOICE[key]["method"]
    policy = wgrad_policy()
    if policy == "default":
        _CHOICE[key] = {"method": default_method(x, w), "source": "default"}
        return _CHOICE[key]["method"]
    if policy in WGRAD_METHODS:
        _CHOICE[key] = {"method": policy, "source": "forced"}
        return policy
    ckey = _cache_key(x, w)
    cached = _read_cache().get(ckey)
    if cached and cached.get("method") in applicable_methods(x, w):
        _CHOICE[key] = {"method": cached["method"], "source": "cache",
                        "median_s": cached.get("median_s")}
    elif policy == "frozen":
        _CHOICE[key] = {"method": default_method(x, w), "source": "frozen default"}
    else:
        print(f"conv_group: timing the weight-gradient methods for x{list(x.shape)} "
              f"w{list(w.shape)} {str(x.dtype).replace('torch.', '')} (once per machine; "
              f"saved in {cache_path()})", file=sys.stderr)
        entry = measure_wgrad(x, g, w)
        _write_cache(ckey, entry)
        _CHOICE[key] = {"method": entry["method"], "source": "measured",
                        "median_s": entry["median_s"]}
    return _CHOICE[key]["method"]


def _shape_name(k: tuple) -> str:
    return f"x{list(k[0])} w{list(k[1])} {k[2]}".replace("torch.", "")


def chosen_methods() -> dict[str, str]:
    """Shape -> method chosen in this process, for run.json; a conv before a
    2x2 max-pool that ran the method's variant is listed apart, and so is one
    whose data gradient ran csrc/conv_group_dgrad.py's kernel (the default
    before a pool; oneDNN's dense data gradient is not listed)."""
    chosen = {_shape_name(k): v["method"] for k, v in _CHOICE.items()}
    pooled = sorted(_shape_name(k) for k in _BEFORE_POOL_RAN if k in _CHOICE)  # a set: fixed order
    data = {f"{_shape_name(k)} before 2x2 max-pool, data gradient": form
            for k, form in sorted(dgrad.RAN.items(), key=lambda kv: _shape_name(kv[0]))}
    return chosen | {f"{name} before 2x2 max-pool": f"{chosen[name]}_pooled" for name in pooled} | data


def wgrad_decisions() -> dict[str, dict]:
    """Shape -> {method, source (default/forced/cache/measured/frozen default), median_s}."""
    return {_shape_name(k): dict(v) for k, v in _CHOICE.items()}


# ----------------------------------------------------------------------------- the ops
class Conv3x3(torch.autograd.Function):
    """Stride-1, padding-1 conv without bias; ``before_pool``: its output
    feeds a 2x2 max-pool (the weight gradient may use its sparse dY)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, before_pool: bool = False) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.before_pool = before_pool
        return F.conv2d(x, w, padding=1)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        x, w = ctx.saved_tensors
        gx, gw = _conv_backward(x, w, g, ctx.before_pool, *ctx.needs_input_grad[:2])
        return gx, gw, None


def _conv_backward(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, before_pool: bool,
                   need_x: bool, need_w: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(dX, dW) of y = conv2d(x, w, padding=1) given dY = g, by the chosen methods."""
    g = g.contiguous(memory_format=torch.channels_last)
    gx = dgrad.input_grad(g, x, w, before_pool) if need_x else None
    gw = _wgrad_fn(x, g, w, before_pool)(x, g, w) if need_w else None
    return gx, gw


class ConvPoolBnAct(torch.autograd.Function):
    """The group's first conv, then the fused 2x2 max-pool + BN + activation,
    as one autograd node, so that its backward can hand the pool's own
    gradient and argmax codes to the before-pool kernels (the ``*_from_pool``
    ops) instead of writing the full-size dY, three quarters zeros, and
    reading it back in both kernels (about 1.1 GB a step at batch 1536). The
    same bits as the two nodes it replaces; where those kernels do not run
    (another weight-gradient policy, oneDNN's data gradient, fp32), the
    backward writes the full-size dY and runs what Conv3x3 would."""

    @staticmethod
    def forward(ctx, x, w, weight, bias, running_mean, running_var, training, eps, momentum, act):
        y = F.conv2d(x, w, padding=1)
        out, pooled, codes, stats, new_rm, new_rv = pool_bn_act_fwd(
            y, weight, bias, running_mean, running_var, training, eps, momentum, act)
        ctx.save_for_backward(x, w, pooled, codes, stats)
        ctx.in_hw, ctx.training, ctx.act = tuple(y.shape[2:]), training, act
        ctx.bn_dtypes = (weight.dtype, bias.dtype)
        ctx.mark_non_differentiable(new_rm, new_rv)
        return out, new_rm, new_rv

    @staticmethod
    def backward(ctx, grad_out, _grad_rm, _grad_rv):
        x, w, pooled, codes, stats = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[:2]
        from_pool = _from_pool_applies(x, w, need_x)
        dy, dweight, dbias = pool_bn_act_bwd(pooled, codes, grad_out, stats, *ctx.in_hw, ctx.training,
                                             ctx.act, pooled_dx=from_pool)
        if from_pool:
            key = (tuple(x.shape), tuple(w.shape), x.dtype)  # run.json lists them as the two nodes did
            _BEFORE_POOL_RAN.add(key)
            gx = gw = None
            if need_x:
                method = dgrad.dgrad_method()
                dgrad.RAN[key] = dgrad.form_of(method)
                gx = dgrad.conv3x3_dgrad_from_pool(dy, codes, w, *ctx.in_hw, method == "pooled")
            if need_w:
                gw = wgrad.conv3x3_wgrad_from_pool(x, dy, codes, w)
        else:
            gx, gw = _conv_backward(x, w, dy, True, need_x, need_w)
        return (gx, gw, dweight.to(ctx.bn_dtypes[0]), dbias.to(ctx.bn_dtypes[1]), None, None, None,
                None, None, None)


def _from_pool_applies(x: torch.Tensor, w: torch.Tensor, need_x: bool) -> bool:
    """Whether ConvPoolBnAct's backward runs the before-pool kernels from the
    pool's own gradient: where Conv3x3 would run both (the default weight-
    gradient policy choosing dpbf16, and, if dX is needed, the pooled data
    gradient), on bf16."""
    if FORCE is not None or wgrad_policy() != "default" or x.dtype != torch.bfloat16:
        return False
    if choose_wgrad(x, x, w) not in _BEFORE_POOL:  # g is read only by the (not default) auto policy
        return False
    return not need_x or (dgrad.dgrad_method() in dgrad.POOLED_METHODS and dgrad.supported())


def _wgrad_fn(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor, before_pool: bool) -> Callable:
    """The chosen method, or its before-pool variant where the default policy runs it."""
    method = choose_wgrad(x, g, w)
    if before_pool and method in _BEFORE_POOL and FORCE is None and wgrad_policy() == "default":
        _BEFORE_POOL_RAN.add((tuple(x.shape), tuple(w.shape), x.dtype))
        return _BEFORE_POOL[method]
    return _METHODS[method]


def conv3x3(x: torch.Tensor, weight: torch.Tensor, before_pool: bool = False) -> torch.Tensor:
    """Autocast-aware entry: the weight is cast to the activation dtype the way
    autocast would, and the cast stays differentiable."""
    if torch.is_autocast_enabled("cpu"):
        x = x.to(torch.get_autocast_dtype("cpu"))
    w = weight.to(x.dtype)
    with torch.autocast("cpu", enabled=False):
        return Conv3x3.apply(x, w, before_pool)


def conv_pool_bn_act(x: torch.Tensor, weight: torch.Tensor, bn: torch.nn.BatchNorm2d,
                     act: str) -> torch.Tensor:
    """``pool_bn_act(conv3x3(x, weight, before_pool=True), bn, act)`` as one
    node (ConvPoolBnAct), autocast-aware as :func:`conv3x3`; dtypes the fused
    pool does not take (fp16) run the two ops."""
    if torch.is_autocast_enabled("cpu"):
        x = x.to(torch.get_autocast_dtype("cpu"))
    if x.dtype not in FUSED_DTYPES or x.device.type != "cpu":
        return pool_bn_act(conv3x3(x, weight, before_pool=True), bn, act)
    w = weight.to(x.dtype)
    args = bn_module_args(bn, act)
    with torch.autocast("cpu", enabled=False):
        out, new_rm, new_rv = ConvPoolBnAct.apply(x, w, *args)
    update_running_stats(bn, args[4], new_rm, new_rv)
    return out


@register("conv_group", "cpu")
def conv_group_cpu(group: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The reference group with the shape-tuned convolution and, where the
    group's bn_act is this backend's, the fused max-pool + BN + act after
    conv1. ``group`` is read by its attributes (conv1, pool, norm1, conv2,
    norm2, act, and bn_act where set): models.layers.ConvGroup, which this
    floor does not import."""
    act = getattr(group, "bn_act", reference_bn_act)
    pool_2x2 = isinstance(group.pool, torch.nn.MaxPool2d) and _is_2x2(group.pool)
    fused = FUSED_POOL and act is bn_act and pool_2x2
    if fused and POOL_HANDOFF:
        x = conv_pool_bn_act(x, group.conv1.weight, group.norm1, group.act)
    elif fused:
        x = pool_bn_act(conv3x3(x, group.conv1.weight, before_pool=True), group.norm1, group.act)
    else:
        x = act(group.pool(conv3x3(x, group.conv1.weight, before_pool=pool_2x2)), group.norm1, group.act)
    x = conv3x3(x, group.conv2.weight)
    return act(x, group.norm2, group.act)


def _is_2x2(pool: torch.nn.MaxPool2d) -> bool:
    """The fused kernel is the default 2x2 / stride 2 / no padding pool only."""
    as_pair = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v)  # noqa: E731
    return (as_pair(pool.kernel_size) == (2, 2) and as_pair(pool.stride or pool.kernel_size) == (2, 2)
            and as_pair(pool.padding) == (0, 0) and as_pair(pool.dilation) == (1, 1)
            and not pool.ceil_mode)
