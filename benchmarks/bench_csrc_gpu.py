"""The CUDA C++ kernels on a GPU against torch (and Triton, when it runs):
each engine that can run here (the built extension ``_C``, CuPy/NVRTC).

    python benchmarks/bench_csrc_gpu.py [--batch 2000] [--reps 20] [--json out.json]

- bn_act: BatchNorm (training) + GELU forward + backward at the CIFAR net's six
  BN shapes, bf16 channels_last;
- augment: crop + flip + normalise of a batch from the padded uint8 dataset on
  the GPU (bf16 output, as the trainer feeds the model);
- gemm: fp32-accumulating fp16/bf16 GEMM vs torch.mm (cuBLAS, output in the
  input dtype) at square sizes; TFLOP/s = 2*M*N*K / time.

Times are medians of ``--reps`` repetitions after warm-up, synchronised, the
implementations timed in turn in each repetition. Without CUDA it says so and
exits 0 (this project's CI machines have no GPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch


def _timed(impls: dict, reps: int) -> dict:
    for fn in impls.values():
        fn()
        fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {k: [] for k in impls}
    for _ in range(reps):
        for name, fn in impls.items():
            torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def _engines() -> list[str]:
    from dawnbench_fast.csrc import cupy_path, ops

    out = []
    if ops._extension_reason() is None:
        out.append("extension")
    if cupy_path.unavailable_reason() is None:
        out.append("cupy")
    return out


def _with_engine(engine: str, fn):
    from dawnbench_fast.csrc import ops

    def run():
        ops._ENGINE["cuda"] = engine
        return fn()
    return run


def _triton_op(op: str):
    try:
        from dawnbench_fast import dispatch

        if dispatch.unavailable_reason("triton", torch.device("cuda")) is None:
            return dispatch.get_op(op, "triton")
    except Exception:  # Triton missing or broken: leave it out of the table
        return None
    return None


def bench_bn_act(batch: int, reps: int, engines: list[str]) -> dict:
    from dawnbench_fast.csrc import ops
    from dawnbench_fast.models.layers import BatchNorm, bn_act

    shapes = [(64, 15), (64, 15), (256, 7), (256, 7), (256, 3), (256, 3)]
    layers = []
    for c, side in shapes:
        x = torch.randn(batch, c, side, side, device="cuda").to(torch.bfloat16)
        x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
        g = torch.randn_like(x)
        layers.append((x, g, BatchNorm(c).cuda()))

    def run(fn):
        def step():
            for x, g, bn in layers:
                x.grad = None
                fn(x, bn, "gelu").backward(g)
        return step

    impls = {"torch": run(bn_act)}
    for e in engines:
        impls[f"csrc ({e})"] = _with_engine(e, run(ops.bn_act))
    tri = _triton_op("bn_act")
    if tri is not None:
        impls["triton"] = run(tri)
    nbytes = sum(5 * x.numel() * 2 for x, _, _ in layers)  # x twice, y, dy, dx (bf16)
    res = _timed(impls, reps)
    return {"op": "bn_act fwd+bwd gelu bf16 channels_last", "batch": batch, "seconds": res,
            "GB/s (5 passes of bf16)": {k: nbytes / v / 1e9 for k, v in res.items()}}


def bench_augment(batch: int, reps: int, engines: list[str]) -> dict:
    from dawnbench_fast.csrc import ops
    from dawnbench_fast.data import augment as A

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(50_000, 32, 32, 3), dtype=np.uint8)
    padded = torch.from_numpy(A.pad_reflect(images, 2)).cuda()
    scale, shift = (torch.from_numpy(a).cuda() for a in A.normalisation((0.5,) * 3, (0.25,) * 3))
    idx = torch.from_numpy(rng.permutation(50_000)[:batch]).cuda()
    p = A.augment_params(0, 1, idx.cpu().numpy())
    impls = {"torch": lambda: A.augment_torch(padded, idx, p, scale, shift).to(torch.bfloat16)}
    for e in engines:
        impls[f"csrc ({e})"] = _with_engine(
            e, lambda: ops.augment(padded, idx, p, scale, shift, out_dtype=torch.bfloat16))
    tri = _triton_op("augment")
    if tri is not None:
        impls["triton"] = lambda: tri(padded, idx, p, scale, shift, out_dtype=torch.bfloat16)
    res = _timed(impls, reps)
    return {"op": "augment -> bf16", "batch": batch, "seconds": res,
            "images/s": {k: batch / v for k, v in res.items()}}


def bench_gemm(n: int, dtype: torch.dtype, reps: int, engines: list[str]) -> dict:
    from dawnbench_fast.csrc import ops

    a = torch.randn(n, n, device="cuda").to(dtype)
    b = torch.randn(n, n, device="cuda").to(dtype)
    impls = {"torch.mm (cuBLAS)": lambda: a @ b}
    for e in engines:
        impls[f"csrc ({e})"] = _with_engine(e, lambda: ops.gemm_mma(a, b))
    res = _timed(impls, reps)
    return {"op": f"gemm {n}^3 {str(dtype).replace('torch.', '')}", "seconds": res,
            "TFLOP/s": {k: 2 * n**3 / v / 1e12 for k, v in res.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_csrc_gpu: no CUDA device here; nothing measured")
        return 0
    engines = _engines()
    if not engines:
        from dawnbench_fast.csrc import ops

        print(f"bench_csrc_gpu: {ops._extension_reason()}; and no CuPy")
        return 1
    runs = [bench_bn_act(a.batch, a.reps, engines), bench_augment(a.batch, a.reps, engines)]
    for n in (1024, 4096):
        for dt in (torch.float16, torch.bfloat16):
            runs.append(bench_gemm(n, dt, a.reps, engines))
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "engines": engines, "runs": runs}
    for r in runs:
        print(r["op"], f"batch {r['batch']}" if "batch" in r else "")
        extra_key = next((k for k in r if k not in ("op", "batch", "seconds")), None)
        for k, s in r["seconds"].items():
            extra = f"  {r[extra_key][k]:,.1f} {extra_key}" if extra_key else ""
            print(f"  {k:22s} {s * 1e3:9.3f} ms{extra}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
