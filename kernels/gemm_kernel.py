"""C = A @ B on tensor cores: fp16/bf16 (or fp32/TF32) inputs, fp32
accumulation, arbitrary strides (so A @ B.T and X @ X.T need no copies),
autotuned tile configs, grouped program order for L2 reuse; optional epilogue
C = alpha * A @ B + beta * D, which fuses the element-wise parts of a
Newton-Schulz iteration into its two products.

Used by the linear head and by Muon's Newton-Schulz products (X @ X.T).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dawnbench_fast.kernels.launches import interpreting


def gemm_configs() -> list[triton.Config]:
    """Autotuning space. The interpreter gets one small config: autotuning
    there would need a timing function and would measure nothing useful."""
    if interpreting():
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4},
                              num_warps=4, num_stages=1)]
    # (BM, BN, BK, warps, stages): large tiles for Newton-Schulz, small for the
    # head. Kept to the configs that compile without spills for sm_80 and
    # sm_90 (python -m dawnbench_fast.kernels.report); 256-wide tiles and
    # 128x64x64 with 4 warps spilled.
    shapes = [
        (128, 128, 32, 8, 4), (128, 64, 64, 8, 3), (128, 64, 32, 8, 4), (64, 128, 64, 8, 3),
        (64, 128, 32, 4, 4), (64, 64, 32, 4, 5), (32, 64, 64, 4, 4),
    ]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                          num_warps=w, num_stages=s) for bm, bn, bk, w, s in shapes]


@triton.jit
def gemm_kernel(
    a_ptr, b_ptr, c_ptr, d_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_dm, stride_dn,
    alpha, beta,
    HAS_D: tl.constexpr, F32_MATH: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    # Grouped ordering: GROUP_M row-tiles share the same B column-tiles in L2.
    group = pid // (GROUP_M * grid_n)
    first_m = group * GROUP_M
    group_size = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * grid_n)) % group_size
    pid_n = (pid % (GROUP_M * grid_n)) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + rk) < K
        a = tl.load(a_ptrs, mask=(rm < M)[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & (rn < N)[None, :], other=0.0)
        if F32_MATH:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_mask = (rm < M)[:, None] & (rn < N)[None, :]
    if HAS_D:  # epilogue C = alpha * A@B + beta * D (a Newton-Schulz step's update)
        d = tl.load(d_ptr + rm[:, None] * stride_dm + rn[None, :] * stride_dn, mask=c_mask,
                    other=0.0)
        acc = alpha * acc + beta * d.to(tl.float32)
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


gemm_autotuned = triton.autotune(configs=gemm_configs(), key=["M", "N", "K", "F32_MATH", "HAS_D"])(
    gemm_kernel
)


def gemm_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Reference: fp32 product, cast to the input dtype."""
    return (a.float() @ b.float()).to(a.dtype)
