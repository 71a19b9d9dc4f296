"""What a generator gets: the inputs (runs dataset, benchmark and eval files, the paper's values)
and the output helpers (figures and tables written atomically, never over existing files
unless overwrite)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

import xarray as xr

from analysis.run import Run

from .registry import Skip

PAPER_VALUES = Path(__file__).with_name("paper_values.json")


def load_paper_values() -> dict[str, Any]:
    """The paper's reported numbers (figures/paper_values.json)."""
    return json.loads(PAPER_VALUES.read_text())


@dataclass
class Context:
    runs_dir: Path | None
    out: Path
    # further run folders whose finished runs join `run_list` / `runs` beside RUNS_DIR's (e.g. a plan's
    # second-rate runs for table_lr_sweep); routing datasets, evals and benchmarks stay RUNS_DIR's
    more_runs: tuple[Path, ...] = ()
    overwrite: bool = False
    benchmarks: list[Path] = field(default_factory=list)  # directories searched for benchmark JSON
    evals: Path | None = None  # harness outputs, one sub-directory per run name
    mhar_heads: int | None = None  # the H that stands for MHAR in comparisons (None: choose_mhar_H's rule)
    written: list[Path] = field(default_factory=list)

    @cached_property
    def _read(self) -> tuple[list[Run], Path]:
        """Finished runs under runs_dir (and `more_runs`), each read once, and the root their names
        are relative to (RUNS_DIR alone; with more folders, their common parent, so that
        `runs/NAME` and `bestvsbest/runs/NAME` stay apart); Skip when there are none."""
        from analysis.runs import find_run_dirs, read_runs

        if self.runs_dir is None:
            raise Skip("no runs directory given", ["a RUNS_DIR with training runs"])
        if self.more_runs:
            dirs = [d for folder in (self.runs_dir, *self.more_runs) for d in find_run_dirs(folder)]
            runs, root = read_runs(dirs, finished_only=True)
        else:
            runs, root = read_runs(self.runs_dir, finished_only=True)[0], self.runs_dir
        if not runs:
            where = ", ".join(str(p) for p in (self.runs_dir, *self.more_runs))
            raise Skip(f"no finished runs under {where}", ["finished training runs (mhar train / mhar sweep)"])
        return runs, Path(root)

    @property
    def run_list(self) -> list[Run]:
        """Finished runs under runs_dir (and `more_runs`), each read once (`analysis.run.Run`); Skip when none."""
        return self._read[0]

    @cached_property
    def runs(self) -> xr.Dataset:
        """The same runs in long form (see analysis.runs), for selecting and pivoting."""
        from analysis.runs import runs_dataset

        runs, root = self._read
        return runs_dataset(runs, root)

    def records(self, ds: xr.Dataset) -> list[dict[str, Any]]:
        """The run records (`Run.record`, short runs averaging what they have) of the runs a
        selection of `runs` holds, for analysis.stats.curves."""
        paths = set(ds["path"].values.tolist())
        return [r.record(full=False) for r in self.run_list if str(r.path) in paths]

    def mhar_H(self, available: Iterable[int], kv: int | None) -> int | None:
        """The H that stands for MHAR among `available` in every figure and table:
        `common.choose_mhar_H` with the study's `mhar_heads` preferred (the H its claims use)."""
        from .common import choose_mhar_H

        return choose_mhar_H(available, kv, prefer=self.mhar_heads)

    @cached_property
    def paper(self) -> dict[str, Any]:
        return load_paper_values()

    def save_figure(self, fig, name: str) -> list[Path]:
        from .style import save_figure

        paths = save_figure(fig, self.out, name, overwrite=self.overwrite)
        self.written += paths
        return paths

    def write_table(self, table) -> list[Path]:
        from .tables import write_table

        paths = write_table(table, self.out, overwrite=self.overwrite)
        self.written += paths
        return paths

    def routing_datasets(self) -> list[Path]:
        """Captured routing datasets RUNS_DIR/*/routing.nc (`mhar capture RUN`), sorted; Skip when none."""
        from mhar_probe.capture.runs import DEFAULT_DATASET

        need = ["routing datasets: `mhar capture RUN` for attnres / mhar runs (writes RUN/routing.nc)"]
        if self.runs_dir is None:
            raise Skip("no runs directory given", need)
        found = sorted(self.runs_dir.glob(f"*/{DEFAULT_DATASET}"))
        if not found:
            raise Skip(f"no captured routing datasets (*/{DEFAULT_DATASET}) under {self.runs_dir}", need)
        return found

    def benchmark_files(self, subdir: str | None = None) -> list[Path]:
        """JSON files in the benchmark directories (or their `subdir`), sorted, de-duplicated."""
        found: dict[Path, Path] = {}  # resolved -> as listed (a linked file keeps its link's name)
        for root in self.benchmarks:
            base = root / subdir if subdir else root
            if base.is_dir():
                for p in sorted(base.glob("*.json")):
                    found.setdefault(p.resolve(), p)
        return list(found.values())
