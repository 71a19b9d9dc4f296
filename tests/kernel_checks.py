"""Shared by the kernel tests (CPU and GPU): the device they run on, the error measure they use,
the poisoned kernel configuration they pass to every stack and call, and a stack wrapper that
appends strided sources."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mhar_probe.kernels.config import KernelConfig

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
def split_e(monkeypatch):
    """The E reduction split every 2 positions so that tiny shapes still exercise it (import it
    into a test module to apply it there)."""
    import mhar_probe.kernels.route.bwd_collect as rbc

    monkeypatch.setattr(rbc, "E_CHUNK", 2)


#: what the kernel tests run: every kernel output NaN-filled before the kernel writes it, so an
#: element a kernel fails to write fails any comparison (passed to each stack and call, never set
#: process-wide)
POISON = KernelConfig(poison=True)


def poisoned(**changes: object) -> KernelConfig:
    """POISON with `changes` (KernelConfig fields)."""
    return dataclasses.replace(POISON, **changes)


def poisoned_stack(capacity: int, params=None, config: KernelConfig = POISON, **changes: object):
    """A TritonSourceStack that runs `config` (default POISON) with `changes`."""
    from mhar_probe.kernels import TritonSourceStack

    return TritonSourceStack(capacity, params, config=dataclasses.replace(config, **changes))


def poisoned_route(*args, config: KernelConfig = POISON, **kwargs):
    """`route_triton` with `config` (default POISON)."""
    from mhar_probe.kernels import route_triton

    return route_triton(*args, config=config, **kwargs)


def spy_launcher(monkeypatch, module, name: str, record) -> list:
    """Replace the launcher `module.<name>` (a `Launcher`, called as (grid, args, consts, ...)) by
    one that appends record(args, consts) for every launch, then launches; returns that list."""
    seen: list = []
    launcher = getattr(module, name)

    def spy(grid, args, consts, *rest):
        seen.append(record(args, consts))
        launcher(grid, args, consts, *rest)

    monkeypatch.setattr(module, name, spy)
    return seen
