"""The tail-mean: the paper's summary of a training curve, defined once.

    tail_mean(v, k) = mean(v[-k:]),   k = 11 evaluations (the paper's)

A run with fewer than k evaluations averages those it has (`tail_mean` returns how many it
used); the statistics that compare runs require the full window (`full_tail_mean`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: evaluations in the tail window (the paper: the last 11)
TAIL_K = 11


def tail_mean(values: Sequence[float], k: int = TAIL_K) -> tuple[float, int]:
    """(mean of the last min(k, len(values)) values, how many): NaN and 0 for no values."""
    used = min(k, len(values))
    return (math.fsum(values[-used:]) / used if used else math.nan), used


def full_tail_mean(values: Sequence[float], k: int = TAIL_K, *, where: str = "run") -> float:
    """Mean of the last k values; fewer than k is a ValueError naming `where`."""
    if k < 1:
        raise ValueError(f"tail length k must be >= 1, got {k}")
    if len(values) < k:
        raise ValueError(f"{where} has {len(values)} evaluations; the tail-mean needs k={k} (lower it with --k)")
    return tail_mean(values, k)[0]
