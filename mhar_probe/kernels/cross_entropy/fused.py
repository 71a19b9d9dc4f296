"""Fused next-token cross-entropy over a large vocabulary: the logits are read in their own dtype,
never materialised in fp32, and the gradient is written once, in the logits' dtype.

    lse_i  = log sum_v exp(x_{i,v})                       (online, fp32, one pass over the row)
    loss   = sum_{i: t_i != ignore} (lse_i - x_{i,t_i}) / #{i: t_i != ignore}
    dx_i,v = g / count * (exp(x_{i,v} - lse_i) - [v == t_i])   (0 for an ignored row)

The torch path (`F.cross_entropy(logits.float(), t)` under bf16 autocast) casts the logits to
fp32, writes fp32 log-probabilities, reads both back for the gradient and casts that to bf16:
about 30 bytes per logit against this kernel pair's 6 (2 to read in the forward, 2 + 2 in the
backward). At the 100M microbatch (16,384 x 151,936 logits) that is the largest single cost of
the training step after the matrix multiplies (benchmarks/train_throughput/results.md).

Reference: `naive.cross_entropy_reference_f64` (beside this file). Targets must lie in [0, V) or equal the
ignore index (as for `F.cross_entropy`; out-of-range targets read a clamped column instead of
raising). Every launch is asynchronous and capturable: the reduction's count and the upstream
gradient stay on the device.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor
from torch.autograd.function import once_differentiable

from mhar_probe.kernels.launch import cdiv, is_interpreted

FWD_BLOCK_V = 4096  # columns per iteration of a row's online log-sum-exp (one program per row)
BWD_BLOCK_V = 4096  # columns per backward program (a 2-D grid: rows x column blocks)
NUM_WARPS = 8


@triton.jit
def ce_fwd_kernel(logits_ptr, targets_ptr, lse_ptr, loss_ptr, V, stride_row, ignore_index,
                  BLOCK_V: tl.constexpr):
    """Program i: lse_i by an online max / rescaled sum per lane, then loss_i = lse_i - x_{i,t_i}."""
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * stride_row
    cols = tl.arange(0, BLOCK_V)
    m = tl.full([BLOCK_V], float("-inf"), tl.float32)  # per-lane running max
    s = tl.zeros([BLOCK_V], tl.float32)  # per-lane sum of exp(x - m)
    for start in range(0, V, BLOCK_V):
        idx = start + cols
        x = tl.load(base + idx, mask=idx < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        shift = tl.where(m_new > float("-inf"), m_new, 0.0)  # a lane with no column yet stays (-inf, 0)
        s = s * tl.exp(m - shift) + tl.exp(x - shift)
        m = m_new
    m_row = tl.max(m, 0)
    s_row = tl.sum(s * tl.exp(m - m_row), 0)
    lse = m_row + tl.log(s_row)
    t = tl.load(targets_ptr + row)
    valid = t != ignore_index
    col = tl.minimum(tl.maximum(t, 0), V - 1)
    x_t = tl.load(base + col).to(tl.float32)
    tl.store(lse_ptr + row, lse)
    tl.store(loss_ptr + row, tl.where(valid, lse - x_t, 0.0))


@triton.jit
def ce_bwd_kernel(logits_ptr, targets_ptr, lse_ptr, grad_ptr, count_ptr, dlogits_ptr, V, stride_row,
                  stride_drow, ignore_index, BLOCK_V: tl.constexpr):
    """Program (i, b): columns [b BLOCK_V, (b+1) BLOCK_V) of row i's gradient."""
    row = tl.program_id(0).to(tl.int64)
    idx = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    inside = idx < V
    x = tl.load(logits_ptr + row * stride_row + idx, mask=inside, other=0.0).to(tl.float32)
    lse = tl.load(lse_ptr + row)
    t = tl.load(targets_ptr + row)
    scale = tl.load(grad_ptr).to(tl.float32) / tl.maximum(tl.load(count_ptr).to(tl.float32), 1.0)
    scale = tl.where(t != ignore_index, scale, 0.0)
    d = (tl.exp(x - lse) - tl.where(idx == t, 1.0, 0.0)) * scale
    tl.store(dlogits_ptr + row * stride_drow + idx, d.to(dlogits_ptr.dtype.element_ty), mask=inside)


def _output(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, poison: bool) -> Tensor:
    """A kernel output: uninitialised, or NaN-filled where `poison` (a test aid)."""
    if poison:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


class FusedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of logits [N, V] (any float dtype) against targets [N]; fp32 scalar."""

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, ignore_index: int, poison: bool) -> Tensor:
        N, V = logits.shape
        lse = _output((N,), torch.float32, logits.device, poison)  # [N]
        rows = _output((N,), torch.float32, logits.device, poison)  # [N] per-row loss (0 where ignored)
        if N:
            ce_fwd_kernel[(N,)](logits, targets, lse, rows, V, logits.stride(0), ignore_index,
                                BLOCK_V=FWD_BLOCK_V, num_warps=NUM_WARPS)
        count = (targets != ignore_index).sum()  # [] int64, on the device
        ctx.save_for_backward(logits, targets, lse, count)
        ctx.ignore_index, ctx.poison = ignore_index, poison
        return rows.sum() / count  # 0 / 0 = nan when every target is ignored, as F.cross_entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None]:
        logits, targets, lse, count = ctx.saved_tensors
        N, V = logits.shape
        dlogits = _output((N, V), logits.dtype, logits.device, ctx.poison)  # [N, V]
        if N:
            ce_bwd_kernel[(N, cdiv(V, BWD_BLOCK_V))](
                logits, targets, lse, grad.contiguous(), count, dlogits, V, logits.stride(0),
                dlogits.stride(0), ctx.ignore_index, BLOCK_V=BWD_BLOCK_V, num_warps=NUM_WARPS)
        return dlogits, None, None, None


def fused_cross_entropy(logits: Tensor, targets: Tensor, ignore_index: int = -100, poison: bool = False) -> Tensor:
    """`F.cross_entropy(logits.float(), targets, ignore_index=...)` (mean) without the fp32 copy:
    logits [..., V] on CUDA (or the Triton interpreter), targets [...] integer. `poison`: every
    kernel output NaN-filled before the kernel writes it (`KernelConfig.poison`; the tests')."""
    if not logits.is_cuda and not is_interpreted(ce_fwd_kernel):
        raise RuntimeError("the fused cross-entropy needs CUDA tensors (or TRITON_INTERPRET=1 set "
                           "before triton is imported); use the torch loss on the CPU")
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} disagree")
    flat = logits.reshape(-1, logits.shape[-1])  # [N, V] (a view when the rows are contiguous)
    if flat.stride(-1) != 1:
        flat = flat.contiguous()
    return FusedCrossEntropy.apply(flat, targets.reshape(-1).long().contiguous(), int(ignore_index),
                                    bool(poison))
