"""The processes below one process, read from /proc (Linux): torchrun starts its ranks in sessions
of their own, so neither a process-group signal nor killing torchrun alone reaches them; whoever
stops a torchrun run (a test's time limit, a benchmark's budget) signals this list."""

from __future__ import annotations

import os
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, children before grandchildren (ppid is field 4 of /proc/N/stat,
    read after the command name's closing parenthesis, which may itself hold spaces)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # gone since the listing
                continue
            parent[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier]
        found += kids
        frontier = kids
    return found


def signal_all(pids: list[int], sig: int) -> None:
    """Send `sig` to each of `pids`, skipping the ones that have exited meanwhile."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
