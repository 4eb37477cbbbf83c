"""The captured step's kernel time by kernel group: which share
of a profiled step's device time went to the augmentation, BN + activation,
the max-pool, the convolutions, the GEMMs, the optimisers, ...

A step replayed as a CUDA graph launches its kernels from the graph, so the
profiler links none of them to an op (roofline/timeline.py); the only handle
left is the kernel's name. :data:`GROUPS` maps names to groups by substrings,
first match wins, in the order listed: our own faces' kernels are named
after their op (Triton's ``augment_kernel``, ``affine_act_kernel``,
``channel_stats_kernel``, ``conv3x3_fwd_kernel``; CUDA C++'s
``augment_crop_flip_*``, ``bn_act_fwd_*``, ``bn_stats_*``), Inductor's after
the ATen ops it fused (``triton_per_fused__native_batch_norm_legit_functional_gelu_3``),
cuDNN's after the convolution pass (``sm90_xmma_fprop_implicit_gemm_*``,
``dgrad``, ``wgrad``), cuBLAS's as GEMMs (``nvjet_*``, ``*gemm*``).

What names cannot tell, the figures do not pretend to: ATen's generic
elementwise, index and reduction kernels (torch's augmentation runs as
those, eagerly, inside the graph) and Inductor kernels that name no op go to
``other``; a kernel whose name matches several groups (Inductor fusing a
max-pool into a BN's kernel) is counted under the first and also listed in
``fused_across`` with the groups it names; ``cutlass::Kernel2<...>`` is a
convolution or a GEMM by its template arguments, which the full name keeps
and the rules read.

How the groups map to the catalogued ops (dispatch.CATALOGUE): ``augment``
is the augment op; ``bn_act`` the bn_act op, which conv_group calls twice a
group; conv_group is ``conv`` + ``max_pool`` + its two ``bn_act`` calls;
``linear`` (the head) and ``newton_schulz`` (Muon) are ``matmul``;
``optimizer`` the foreach updates; ``loss`` the cross-entropy.
"""

from __future__ import annotations

from dawnbench_fast.roofline.timeline import kernel_family
from dawnbench_fast.roofline.trace import Trace

# (group, substrings of the lower-cased kernel name), first match wins
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("augment", ("augment",)),
    ("max_pool", ("max_pool", "maxpool", "pool2d", "bn_act_pool")),
    ("bn_act", ("bn_act", "batch_norm", "batchnorm", "affine_act", "channel_stats", "bn_finalize",
                "bn_bwd", "bn_stats", "bn_shift", "bn_fw", "bn_bw")),
    ("conv", ("conv", "fprop", "dgrad", "wgrad", "implicit_convolve", "nchwtonhwc", "nhwctonchw")),
    ("matmul", ("gemm", "gemv", "nvjet", "cublas", "matmul", "splitk", "triton_tem", "_mm_", "bmm")),
    ("optimizer", ("foreach", "multi_tensor_apply")),
    ("loss", ("cross_entropy", "log_softmax", "nll_loss")),
    ("copy", ("memcpy", "memset")),
)
OTHER = "other"


def groups_of(name: str) -> list[str]:
    """Every group whose substrings ``name`` holds, in :data:`GROUPS`' order
    (a convolution's implicit GEMM is a convolution, not also a GEMM)."""
    low = name.lower()
    found = [g for g, words in GROUPS if any(w in low for w in words)]
    return [g for g in found if not (g == "matmul" and "conv" in found)]


def group_of(name: str) -> str:
    """The group a kernel's time is counted under (``other``: none named)."""
    found = groups_of(name)
    return found[0] if found else OTHER


def group_times(trace: Trace, steps: int) -> dict:
    """Per step: each group's kernel time (us), its share of the kernel time
    and its kernel families with their us; the kernel families whose names
    match several groups (``fused_across``)."""
    if steps < 1:
        raise ValueError(f"group_times over {steps} steps: need at least 1")
    total = sum(k.dur for k in trace.kernels)
    groups: dict[str, dict] = {}
    fused: dict[str, list[str]] = {}
    for k in trace.kernels:
        names = groups_of(k.name)
        group = names[0] if names else OTHER
        family = kernel_family(k.name)
        row = groups.setdefault(group, {"us": 0.0, "families": {}})
        row["us"] += k.dur / steps
        row["families"][family] = row["families"].get(family, 0.0) + k.dur / steps
        if len(names) > 1:
            fused[family] = names
    out = {g: {"us_per_step": r["us"], "share": r["us"] * steps / total if total else 0.0,
               "families": dict(sorted(r["families"].items(), key=lambda kv: -kv[1]))}
           for g, r in sorted(groups.items(), key=lambda kv: -kv[1]["us"])}
    return {"kernel_us_per_step": total / steps, "groups": out, "fused_across": fused}


def weighted(parts: list[tuple[float, dict]]) -> dict:
    """Several variants' :func:`group_times`, each with its weight (its share
    of the run's steps), as one run's: us and shares weighted, families summed."""
    wsum = sum(w for w, _ in parts) or 1.0
    total = sum(w * p["kernel_us_per_step"] for w, p in parts) / wsum
    groups: dict[str, dict] = {}
    fused: dict[str, list[str]] = {}
    for w, p in parts:
        fused.update(p["fused_across"])
        for g, row in p["groups"].items():
            acc = groups.setdefault(g, {"us_per_step": 0.0, "families": {}})
            acc["us_per_step"] += w * row["us_per_step"] / wsum
            for fam, us in row["families"].items():
                acc["families"][fam] = acc["families"].get(fam, 0.0) + w * us / wsum
    for row in groups.values():
        row["share"] = row["us_per_step"] / total if total else 0.0
        row["families"] = dict(sorted(row["families"].items(), key=lambda kv: -kv[1]))
    ordered = dict(sorted(groups.items(), key=lambda kv: -kv[1]["us_per_step"]))
    return {"kernel_us_per_step": total, "groups": ordered, "fused_across": fused}
