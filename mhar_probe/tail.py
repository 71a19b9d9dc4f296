"""The tail-mean: the paper's summary of a training curve, defined once.

    tail_mean = mean(v[-k:]),   v: the validation losses evaluated after step 0, in step order,
                                k = 11 evaluations (the paper's)

A run with fewer than k evaluations after step 0 has no tail-mean (None): a mean over the whole
curve, or one that reaches back to the untrained model's loss at step 0, is not a tail. `mhar train`
then says it has none, and `mhar stats tails` / `ceg` skip the run with a note (`short_tail_note`)
instead of averaging what it has. Every tail-mean in the package, the statistics and the demo is
this one (`tail_of`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: evaluations in the tail window (the paper: the last 11)
TAIL_K = 11


@dataclass(frozen=True)
class Tail:
    """A curve's tail-mean (None: too short), its window k and the evaluations it had after step 0."""

    mean: float | None
    k: int
    evaluations: int

    def note(self, where: str = "run") -> str:
        """Why `where` has no tail-mean (empty when it has one)."""
        return "" if self.mean is not None else short_tail_note(where, self.evaluations, self.k)


def short_tail_note(where: str, evaluations: int, k: int = TAIL_K) -> str:
    """The one sentence for a run too short for the tail-mean."""
    return (f"{where} has {evaluations} evaluation{'s' * (evaluations != 1)} after step 0; "
            f"the tail-mean needs the last k={k}")


def tail_of(points: Iterable[tuple[int, float]], k: int = TAIL_K) -> Tail:
    """The tail-mean of a curve of (step, validation loss) points, in any order (module doc)."""
    if k < 1:
        raise ValueError(f"tail length k must be >= 1, got {k}")
    after_start = [value for step, value in sorted(points, key=lambda p: p[0]) if step > 0]
    if len(after_start) < k:
        return Tail(None, k, len(after_start))
    return Tail(math.fsum(after_start[-k:]) / k, k, len(after_start))


def tail_mean(points: Iterable[tuple[int, float]], k: int = TAIL_K) -> float | None:
    """`tail_of(points, k).mean`."""
    return tail_of(points, k).mean


def full_tail_mean(points: Sequence[tuple[int, float]], k: int = TAIL_K, *, where: str = "run") -> float:
    """The tail-mean of `points`; a curve too short for it is a ValueError naming `where`."""
    tail = tail_of(points, k)
    if tail.mean is None:
        raise ValueError(tail.note(where) + " (lower it with --k)")
    return tail.mean
