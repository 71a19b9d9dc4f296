"""Shared by the CPU kernel tests: the device they run on and the error measure they use."""

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
