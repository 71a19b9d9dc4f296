"""How many intra-op threads a CPU run takes: the CPUs this process may use that nothing else is
using, split between the ranks of a torchrun job on this host.

    threads = max(1, min(allowed // ranks, round(idle / ranks)))

allowed: the CPUs of `os.sched_getaffinity` (a container or `taskset` may allow fewer than the
machine has); idle: how many of those CPUs were idle over a short look at /proc/stat (this process
sleeps meanwhile, so its own work is not counted); ranks: LOCAL_WORLD_SIZE under torchrun, else 1.

Why not torch's default (one thread per CPU): its OpenMP threads wait for each other at the end
of every parallel region, so one thread that loses its CPU to another busy process stalls them
all. Beside one busy process on two cores the README's tiny run fell from thousands of tokens/s to
a few hundred (benchmarks/cpu_threads/results.md). The choice is made once, when a run starts;
`--threads N` sets it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

#: how long /proc/stat is watched to see what else is running (seconds)
LOOK_SECONDS = 0.25


@dataclass(frozen=True)
class ThreadChoice:
    """The thread count of a run and why, in words for the line the run prints first."""

    threads: int
    reason: str

    def line(self) -> str:
        return f"{self.threads} CPU thread{'s' * (self.threads != 1)} ({self.reason})"


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _cpu_times(cpus: list[int], stat: Path) -> tuple[float, float] | None:
    """(idle, total) clock ticks of `cpus` so far, from /proc/stat's per-CPU lines; None unread."""
    wanted = {f"cpu{c}" for c in cpus}
    idle = total = 0.0
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, *ticks = line.split()
        if name in wanted:
            values = [float(t) for t in ticks[:8]]  # user nice system idle iowait irq softirq steal
            idle += values[3] + values[4]
            total += sum(values)
    return (idle, total) if total > 0 else None


def idle_cpus(cpus: list[int], seconds: float = LOOK_SECONDS, stat: Path = Path("/proc/stat")) -> float | None:
    """How many of `cpus` sat idle over the next `seconds` (this process sleeping); None where
    /proc/stat cannot be read (not Linux)."""
    before = _cpu_times(cpus, stat)
    time.sleep(seconds)
    after = _cpu_times(cpus, stat)
    if before is None or after is None or after[1] <= before[1]:
        return None
    return len(cpus) * (after[0] - before[0]) / (after[1] - before[1])


def local_ranks() -> int:
    """Processes of this job on this host (torchrun's LOCAL_WORLD_SIZE; 1 outside torchrun)."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def choose_threads(requested: int | None, ranks: int | None = None, allowed: int | None = None,
                   idle: float | None = None, look: bool = True) -> ThreadChoice:
    """The thread count of a run (the module doc's rule); `requested` (--threads N) wins.
    `allowed` / `idle` are measured unless given (`look=False`: no look at what else runs)."""
    if requested is not None:
        return ThreadChoice(requested, "--threads")
    ranks = local_ranks() if ranks is None else ranks
    allowed = len(allowed_cpus()) if allowed is None else allowed
    share = max(1, allowed // ranks)
    where = f"{allowed} CPUs allowed" + (f", shared by {ranks} ranks on this host" if ranks > 1 else "")
    if idle is None and look and ranks == 1:  # (under torchrun the siblings starting up would count as busy)
        idle = idle_cpus(allowed_cpus())
    if idle is None:
        return ThreadChoice(share, f"{where}; --threads N to choose")
    free = max(1, min(share, int(idle / ranks + 0.5)))
    busy = max(0.0, allowed - idle)
    return ThreadChoice(free, f"{where}, {busy:.1f} busy with other work; --threads N to choose")
