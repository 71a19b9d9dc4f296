"""Benchmark arms timed side by side (`benchmarks/train_throughput`, `benchmarks/multi_gpu`).

Every arm is built and takes its first (eager) step before any arm captures CUDA graphs
(`GraphStep.warm_up` before `capture`), and its memory growth over that first step is kept:

    peak_growth = max allocated during (build + first step) - allocated before the build
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import torch

from ..step import GraphStep

A = TypeVar("A")


def warm_up_arms(builders: Iterable[Callable[[], A]], batch: torch.Tensor, cuda: bool) -> list[A]:
    """Build each arm (an object with `.step`, a GraphStep or EagerStep) in turn, warm it up on
    `batch` ([B, T+1] token ids), record `peak_growth` (bytes, CUDA only), then capture every
    graph-stepped arm's graphs."""
    arms: list[Any] = []
    for build in builders:
        if cuda:
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        arm = build()
        if isinstance(arm.step, GraphStep):
            arm.step.warm_up([batch])  # an eager forward and backward: the step's activation peak
        else:
            arm.step([batch], lr=1e-4)
        if cuda:
            arm.peak_growth = torch.cuda.max_memory_allocated() - before
        arms.append(arm)
    for arm in arms:
        if isinstance(arm.step, GraphStep):
            arm.step.capture()
    return arms
