"""The CUDA C++ kernels on a GPU against torch (and Triton, when it runs):
each engine that can run here (the built extension ``_C``, CuPy/NVRTC), under
pytest-benchmark (one group per comparison).

    python -m pytest benchmarks/bench_csrc_gpu.py [--benchmark-autosave]
    python benchmarks/bench_csrc_gpu.py [--batch 2000] [--reps 20] [--json out.json]   # the same

- bn_act: BatchNorm (training) + GELU forward + backward at the CIFAR net's six
  BN shapes, bf16 channels_last; ``extra_info`` has GB/s of its 5 bf16 passes;
- augment: crop + flip + normalise of a batch from the padded uint8 dataset on
  the GPU (bf16 output, as the trainer feeds the model);
- gemm: fp32-accumulating fp16/bf16 GEMM vs torch.mm (cuBLAS, output in the
  input dtype) at square sizes; TFLOP/s = 2*M*N*K / time.

``BENCH_BATCH`` (default 2000), ``BENCH_ROUNDS`` (default 20) synchronised
rounds after two warm-up calls and two warm-up rounds. Skipped without a CUDA
device (this project's CI machines have none), and per implementation where
it cannot run (no extension build, no CuPy, no Triton).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pytest
import torch
from knobs import env_int

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none here)")

BATCH = env_int("BENCH_BATCH", 2000)
ROUNDS = env_int("BENCH_ROUNDS", 20)
IMPLS = ["torch", "csrc-extension", "csrc-cupy", "triton"]


def _implementation(impl: str, op: str, torch_fn, csrc_fn):
    """The function of ``impl`` for ``op`` (csrc ones pin their engine), or a skip."""
    if impl == "torch":
        return torch_fn
    if impl == "triton":
        try:
            from dawnbench_fast import dispatch
            reason = dispatch.unavailable_reason("triton", torch.device("cuda"))
        except Exception as e:  # Triton missing or broken: no Triton row
            reason = f"{type(e).__name__}: {e}"
        if reason is not None:
            pytest.skip(f"triton: {reason}")
        return dispatch.get_op(op, "triton")
    from dawnbench_fast.csrc import cupy_path
    from dawnbench_fast.csrc import engine as csrc_engine

    engine = impl.removeprefix("csrc-")
    reason = csrc_engine._extension_reason() if engine == "extension" else cupy_path.unavailable_reason()
    if reason is not None:
        pytest.skip(f"{impl}: {reason}")

    def pinned(*args, **kwargs):
        csrc_engine._ENGINE["cuda"] = engine
        return csrc_fn(*args, **kwargs)
    return pinned


def _timed(benchmark, fn) -> float:
    """Median seconds of ``fn``, synchronised, after warm-up."""
    def call():
        fn()
        torch.cuda.synchronize()

    call()
    call()
    benchmark.pedantic(call, rounds=ROUNDS, iterations=1, warmup_rounds=2)
    benchmark.extra_info["device"] = torch.cuda.get_device_name()
    return benchmark.stats.stats.median


@pytest.mark.parametrize("impl", IMPLS)
def test_bn_act(benchmark, impl):
    from dawnbench_fast.csrc import bn_act as csrc_bn_act
    from dawnbench_fast.models.layers import BatchNorm, bn_act

    fn = _implementation(impl, "bn_act", bn_act, csrc_bn_act.bn_act)
    layers = []
    for c, side in [(64, 15), (64, 15), (256, 7), (256, 7), (256, 3), (256, 3)]:
        x = torch.randn(BATCH, c, side, side, device="cuda").to(torch.bfloat16)
        x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
        layers.append((x, torch.randn_like(x), BatchNorm(c).cuda()))

    def step():
        for x, g, bn in layers:
            x.grad = None
            fn(x, bn, "gelu").backward(g)

    benchmark.group = f"bn_act fwd+bwd gelu bf16 channels_last, batch {BATCH}"
    t = _timed(benchmark, step)
    nbytes = sum(5 * x.numel() * 2 for x, _, _ in layers)  # x twice, y, dy, dx (bf16)
    benchmark.extra_info["gbps_5_passes"] = nbytes / t / 1e9


@pytest.mark.parametrize("impl", IMPLS)
def test_augment(benchmark, impl):
    from dawnbench_fast.csrc import augment as csrc_augment
    from dawnbench_fast.data import augment as A

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(50_000, 32, 32, 3), dtype=np.uint8)
    padded = A.pad_reflect(torch.from_numpy(images), 2).cuda()
    scale, shift = (torch.from_numpy(a).cuda() for a in A.normalisation((0.5,) * 3, (0.25,) * 3))
    idx = torch.from_numpy(rng.permutation(50_000)[:BATCH]).cuda()
    p = A.augment_params(0, 1, idx)  # on the device, as the trainer makes them
    fn = _implementation(impl, "augment",
                         lambda *a, out_dtype: A.augment_torch(*a).to(out_dtype), csrc_augment.augment)
    benchmark.group = f"augment -> bf16, batch {BATCH}"
    t = _timed(benchmark, lambda: fn(padded, idx, p, scale, shift, out_dtype=torch.bfloat16))
    benchmark.extra_info["images_per_s"] = BATCH / t


@pytest.mark.parametrize("impl", ["torch", "csrc-extension", "csrc-cupy"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("n", [1024, 4096])
def test_gemm(benchmark, impl, dtype, n):
    from dawnbench_fast.csrc import gemm as csrc_gemm

    fn = _implementation(impl, "gemm", torch.mm, csrc_gemm.gemm_mma)
    a = torch.randn(n, n, device="cuda").to(dtype)
    b = torch.randn(n, n, device="cuda").to(dtype)
    benchmark.group = f"gemm {n}^3 {str(dtype).removeprefix('torch.')}"
    t = _timed(benchmark, lambda: fn(a, b))
    benchmark.extra_info["tflops"] = 2 * n**3 / t / 1e12


def main(argv: list[str] | None = None) -> int:
    import script_entry

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="other arguments go to pytest")
    ap.add_argument("--batch", type=int, help="bn_act and augment batch (BENCH_BATCH)")
    ap.add_argument("--reps", type=int, help="timed rounds (BENCH_ROUNDS)")
    ap.add_argument("--json", help="also write pytest-benchmark's JSON here")
    args, rest = ap.parse_known_args(argv)
    return script_entry.run(__file__, {"BENCH_BATCH": args.batch, "BENCH_ROUNDS": args.reps}, args.json,
                            pytest_args=rest)


if __name__ == "__main__":
    sys.exit(main())
