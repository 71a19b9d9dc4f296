"""Shared by the kernel tests (CPU and GPU): the device they run on, the error measure they use,
and a stack wrapper that appends strided sources."""

from __future__ import annotations

import pytest
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


@pytest.fixture(autouse=True)
def poison_and_split_e(monkeypatch):
    """Kernel outputs poisoned before every launch, and the E reduction split every 2 positions so
    that tiny shapes still exercise it (import it into a test module to apply it there)."""
    import mhar_probe.kernels.route_bwd_collect as rbc
    from mhar_probe.kernels import use_kernel_config

    monkeypatch.setattr(rbc, "E_CHUNK", 2)
    with use_kernel_config(poison=True):
        yield
