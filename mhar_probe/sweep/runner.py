"""Run a sweep: each run of the grid in order, into OUT/<run name>/, with a manifest.

Resumable: finished runs are skipped, interrupted ones continue from their checkpoint, runs
that left files but no checkpoint start over (nothing in them can be resumed). With a time
limit the whole sweep shares one deadline: the run it reaches stops cleanly with a checkpoint
(`mhar_probe.train.Deadline`), is left interrupted, and no further run starts; the same call
again skips the finished runs and resumes that one. Sequential on
CPU or one GPU. Under torchrun every rank walks the same grid in the same order; the process
group is joined once for the whole sweep, the trainer does DDP, rank 0 alone writes files.
"""

from __future__ import annotations

import os
import time
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from ..errors import UserError
from ..outputs import OutputKind, check_device, check_output, is_empty
from ..rundir import RUN, RunLock
from .grid import RUNTIME_FIELDS, RunSpec, SweepGrid
from .manifest import MANIFEST, read_manifest, run_entry, run_status, write_manifest


@dataclass
class SweepResult:
    """What a sweep did: per run, its status before and after this call."""

    out: Path
    runs: list[RunSpec]
    before: dict[str, str] = field(default_factory=dict)
    after: dict[str, str] = field(default_factory=dict)
    #: the time limit ended the sweep before every run finished
    time_limited: bool = False

    @property
    def trained(self) -> list[str]:
        return [s.name for s in self.runs if self.before.get(s.name) != "finished"
                and self.after.get(s.name) == "finished"]

    @property
    def skipped(self) -> list[str]:
        return [s.name for s in self.runs if self.before.get(s.name) == "finished"]


def is_sweep_dir(out: Path) -> bool:
    """A directory `mhar sweep` wrote (its manifest.json is there)."""
    return (out / MANIFEST).is_file()


#: what `mhar sweep` writes: a directory of runs with a manifest
SWEEP = OutputKind("sweep directory", directory=True, is_own=is_sweep_dir, marker=MANIFEST)


def _settings(common: dict[str, Any]) -> dict[str, Any]:
    """`common` with every TrainConfig default filled in, so that a manifest written before an
    option existed compares equal to one that spells out its default."""
    from ..train import TrainConfig

    defaults = {f.name: f.default for f in fields(TrainConfig) if f.default is not MISSING}
    return {k: v for k, v in {**defaults, **common}.items() if k not in RUNTIME_FIELDS}


def _check_out(out: Path, grid: SweepGrid, overwrite: bool) -> list[dict[str, Any]]:
    """Validate OUT against an existing manifest; returns the manifest rows to keep. A folder
    that holds something else than a sweep is refused, with or without --overwrite."""
    if out.exists() and not out.is_dir():
        raise UserError(f"sweep output {out} exists and is not a directory")
    manifest = read_manifest(out) if out.exists() else None
    if manifest is None:
        if out.exists() and not is_empty(out):
            raise UserError(f"{out} is not empty and has no {MANIFEST}, so it is not a sweep directory; "
                            f"choose a new --out")
        return []
    old = _settings(SweepGrid(**manifest["grid"]).model_common()) if manifest.get("grid") else {}
    new = _settings(grid.model_common())
    if old != new and not overwrite:
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        raise UserError(f"{out} holds a sweep with different shared training options "
                        f"({', '.join(keys)}); use a new --out, or --overwrite to retrain its runs")
    return manifest["runs"]


def _checked_rows(out: Path, grid: SweepGrid, overwrite: bool, main: bool) -> list[dict[str, Any]]:
    """`_check_out` on rank 0 alone. Under torchrun rank 0 owns OUT: it creates it, takes its lock and
    writes the manifest (atomically, through a temporary file beside it) before the ranks meet, so
    another rank reading OUT meanwhile could see a half-written sweep directory and refuse it. Those
    ranks write nothing and keep no manifest rows; rank 0's refusal stops the whole launch."""
    return _check_out(out, grid, overwrite) if main else []


def _action(run_dir: Path, overwrite: bool) -> str:
    """skip | resume | restart | train for one run directory, from its status."""
    status = run_status(run_dir)
    if status == "finished" and not overwrite:
        return "skip"
    if overwrite or status == "partial":
        return "restart"
    return "resume" if status == "interrupted" else "train"


def _check_runs(out: Path, specs: list[RunSpec], grid: SweepGrid, overwrite: bool) -> None:
    """Every run's options, and every directory a restart would empty, checked before any run
    trains: a restart replaces only a run directory (`mhar_probe.rundir.RUN`)."""
    for spec in specs:
        run_dir = out / spec.name
        spec.train_config(str(run_dir), grid.common)  # option types and ranges
        if _action(run_dir, overwrite) == "restart" and run_dir.exists():
            check_output(run_dir, RUN, overwrite=True)


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def run_sweep(grid: SweepGrid | dict[str, Any], out: str | Path, *, overwrite: bool = False,
              progress: bool = True, dry_run: bool = False,
              on_run: Callable[[RunSpec, str], None] | None = None, time_limit: float | None = None,
              clock: Callable[[], float] = time.monotonic, deadline: Any = None) -> SweepResult:
    """Train every run of `grid` into `out`; returns statuses before and after.

    overwrite: retrain every run of the grid from scratch (other directories are left alone).
    dry_run: only report the plan (statuses), train nothing and write nothing.
    on_run(spec, action): called before each run with action skip | resume | restart | train.
    time_limit: seconds (on `clock`) from this call that the whole sweep may take (default: the
        grid's common `time_limit`, if any): the run training when it comes stops cleanly with a
        checkpoint, no later run starts, and `result.time_limited` is set.
    deadline: a `mhar_probe.train.Deadline` shared with other calls, instead of `time_limit`
        (one deadline for several sweeps).
    """
    from ..train import Deadline

    if isinstance(grid, dict):
        grid = SweepGrid.from_dict(grid)
    if time_limit is None and deadline is None:
        time_limit = grid.common.get("time_limit")
    if time_limit is not None:
        deadline = Deadline.after(time_limit, clock)
    out = Path(out)
    specs = grid.expand()
    main = _rank() == 0
    kept = _checked_rows(out, grid, overwrite, main)
    result = SweepResult(out=out, runs=specs)
    for spec in specs:
        result.before[spec.name] = run_status(out / spec.name)
    if dry_run:
        result.after = dict(result.before)
        return result
    _check_runs(out, specs, grid, overwrite)
    check_device(grid.common.get("device"))

    # one sweep at a time in OUT: a second one (or --overwrite of a running one) is refused here,
    # naming the holder; each run's own lock is then taken by its trainer before it is touched
    lock = RunLock(out).acquire() if main else None
    try:
        kept = _checked_rows(out, grid, overwrite, main)  # again, under the lock
        return _run_locked(grid, out, specs, kept, result, overwrite=overwrite, progress=progress, main=main,
                           on_run=on_run, deadline=deadline)
    finally:
        if lock is not None:
            lock.release()


def library_bars_off() -> Callable[[], None]:
    """Turn off transformers' own progress bars (each run's save prints "Writing model shards", a bar
    nested in the sweep's); returns the function that puts them back as they were."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    return hf_logging.enable_progress_bar if was_on else (lambda: None)


def _run_locked(grid: SweepGrid, out: Path, specs: list[RunSpec], kept: list[dict[str, Any]],
                result: SweepResult, *, overwrite: bool, progress: bool, main: bool,
                on_run: Callable[[RunSpec, str], None] | None, deadline: Any) -> SweepResult:
    """The body of `run_sweep`, with the sweep directory's lock held."""
    from ..distributed import all_reduce_mean, init_distributed, shutdown
    from ..train import Trainer

    grid_names = {s.name for s in specs}
    others = [r for r in kept if r.get("name") not in grid_names]  # runs of earlier grids stay listed
    entries: dict[str, dict[str, Any]] = {s.name: run_entry(s.name, s.axes(), out / s.name) for s in specs}

    def save() -> None:
        if main:
            write_manifest(out, grid.to_dict(), others + [entries[s.name] for s in specs])

    if main:
        out.mkdir(parents=True, exist_ok=True)
    save()
    info = init_distributed(grid.common.get("device"))
    # the sweep's deadline stops its runs (passed to each trainer), not a limit per run
    runtime = {"progress": progress and main and grid.common.get("progress", True), "time_limit": None}
    bar = tqdm(specs, desc="sweep", unit="run", disable=not (progress and main), dynamic_ncols=True)
    restore_bars = library_bars_off()
    try:
        for spec in bar:
            bar.set_postfix_str(spec.name)
            run_dir = out / spec.name
            action = _action(run_dir, overwrite)
            if action != "skip" and deadline is not None and \
                    all_reduce_mean(float(main and deadline.passed()), info) > 0:  # rank 0's clock decides
                result.time_limited = True
                break
            if on_run is not None:
                on_run(spec, action)
            if action == "skip":
                result.after[spec.name] = "finished"
                continue
            # a restart is the trainer's --overwrite: under the run's lock, after every check
            cfg = spec.train_config(str(run_dir), grid.common, **runtime,
                                    resume=action == "resume", overwrite=action == "restart")
            entries[spec.name] = run_entry(spec.name, spec.axes(), run_dir, status="running")
            save()
            try:
                outcome = Trainer(cfg, info, deadline=deadline).run()
            except BaseException as exc:
                entries[spec.name] = run_entry(spec.name, spec.axes(), run_dir,
                                               status="failed" if not isinstance(exc, KeyboardInterrupt)
                                               else None, error=f"{type(exc).__name__}: {exc}")
                save()
                raise
            entries[spec.name] = run_entry(spec.name, spec.axes(), run_dir)
            result.after[spec.name] = entries[spec.name]["status"]
            save()
            if outcome.get("reason") == "time_limit":
                result.time_limited = True
                break
            if outcome.get("reason") == "interrupted":  # Ctrl-C: the run kept a checkpoint; the sweep stops
                raise KeyboardInterrupt
    finally:
        restore_bars()
        bar.close()
        shutdown(info)
    for spec in specs:  # the runs a time limit left untouched
        result.after.setdefault(spec.name, result.before[spec.name])
    return result
