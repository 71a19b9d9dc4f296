"""Shared by the kernel tests (CPU and GPU): the device they run on, the error measure they use,
and a stack wrapper that appends strided sources."""

from __future__ import annotations

import torch

DEV = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: Triton's interpreter (conftest.py)
EPS = 1e-6


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| in float64 (NaN counts as failure)."""
    a, b = a.double().cpu(), b.double().cpu()
    if torch.isnan(a).any():
        return float("inf")
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


class StridedAppendStack:
    """A source stack whose appended sources are not contiguous (the same values, strided): the
    triton stack must copy each into its buffer at append, as it does for any such tensor,
    instead of the next call's forward kernel storing it."""

    def __init__(self, stack):
        self.stack = stack

    def append(self, x):
        self.stack.append(x.transpose(-1, -2).contiguous().transpose(-1, -2))

    def __len__(self):
        return len(self.stack)

    def route(self, *args):
        return self.stack.route(*args)
