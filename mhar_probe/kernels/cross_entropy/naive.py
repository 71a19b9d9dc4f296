"""The fused cross-entropy's ground truth: its loss and gradient written out in float64.

Nothing here is fast; `fused.py` is tested against it (tests/test_cross_entropy_kernel.py).
"""

from __future__ import annotations

import torch
from torch import Tensor


def cross_entropy_reference_f64(logits: Tensor, targets: Tensor, ignore_index: int = -100
                                ) -> tuple[Tensor, Tensor]:
    """(mean loss, d loss / d logits) in float64 for logits [N, V], targets [N]
    (`fused.py`), written out rather than through `F.cross_entropy`:

        loss = sum_{i valid} (log sum_v exp x_iv - x_{i t_i}) / #valid
        dx_iv = (softmax(x_i)_v - [v == t_i]) / #valid   (0 for ignored rows)"""
    x = logits.double()
    valid = targets != ignore_index  # [N]
    lse = x.max(-1, keepdim=True).values + (x - x.max(-1, keepdim=True).values).exp().sum(-1, keepdim=True).log()
    safe = torch.where(valid, targets, torch.zeros_like(targets))
    picked = x.gather(-1, safe[:, None])  # [N, 1]
    count = valid.sum().double()
    loss = ((lse - picked)[:, 0] * valid).sum() / count
    onehot = torch.zeros_like(x).scatter_(-1, safe[:, None], 1.0)
    grad = ((x - lse).exp() - onehot) * valid[:, None] / count.clamp_min(1.0)
    return loss, grad
