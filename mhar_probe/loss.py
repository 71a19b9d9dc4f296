"""The training objective's next-token cross-entropy: one definition for `mhar train`, `mhar cpt`
and the benchmarks, with the choice of implementation explicit.

    loss = mean_{b,t} -log softmax(logits_{b,t})[targets_{b,t}]

`"fused"`: the Triton kernel pair of `mhar_probe.kernels.cross_entropy` (CUDA only), which reads
the logits in their own dtype and writes their gradient once; `"torch"`: `F.cross_entropy` on the
logits cast to fp32, what the model's own `labels=` loss computes. Both are fp32 math; they
differ by summation order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

LOSS_KERNELS = ("fused", "torch")


def next_token_cross_entropy(logits: Tensor, targets: Tensor, kernel: str = "torch") -> Tensor:
    """Mean cross-entropy of logits [B, T, V] against targets [B, T] (fp32 scalar)."""
    if kernel == "fused":
        from mhar_probe.kernels.cross_entropy import fused_cross_entropy

        return fused_cross_entropy(logits, targets)
    if kernel != "torch":
        raise ValueError(f"loss kernel {kernel!r}: choose from {', '.join(LOSS_KERNELS)}")
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def choose_loss_kernel(requested: str | None, device: torch.device) -> str:
    """The loss kernel a run uses: `requested`, or by default "fused" on CUDA and "torch"
    elsewhere; "fused" asked for off CUDA is a `ValueError` that says why."""
    if requested is None:
        return "fused" if device.type == "cuda" else "torch"
    if requested not in LOSS_KERNELS:
        raise ValueError(f"--loss-kernel must be one of {', '.join(LOSS_KERNELS)}, got {requested!r}")
    if requested == "fused" and device.type != "cuda":
        raise ValueError(f"--loss-kernel fused needs a CUDA device (this run trains on {device.type}); "
                         f"use --loss-kernel torch")
    return requested
