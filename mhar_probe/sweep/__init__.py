"""Sweeps: a grid of training runs in one directory, resumable, with a manifest.

    grid      SweepGrid (the axes and the common training options) and RunSpec (one run)
    manifest  manifest.json: the grid, every run's name and status (rank 0 writes it)
    runner    run_sweep(grid, out): sequential, skips finished runs, resumes interrupted ones
    (`mhar sweep` lives in mhar_probe.cli.sweep)
"""

from .grid import RunSpec, SweepGrid, run_name
from .runner import SweepResult, run_sweep

__all__ = ["RunSpec", "SweepGrid", "SweepResult", "run_name", "run_sweep"]
