"""Many training runs as one xarray dataset, and its pivot onto the sweep grid.

Each run is read once as an `analysis.run.Run`; this module only stacks them.
`load_runs(ROOT)` finds every run directory under ROOT (a directory holding metrics.jsonl)
and returns the *long form*:

    dims      run, eval_step, step
    coords    run (name: path relative to ROOT), method, H, kv, lr, seed, preset, steps,
              hidden_size, layers, corpus, finished, path        (all on `run`)
              H = 0 for methods without routing heads (baseline, hyper)
    data      tail_mean, tail_k, initial_val_loss, final_val_loss, flops, tokens,
              parameters                                            [run]
              val_loss, val_flops                                   [run, eval_step]
              train_loss, flops_at_step                             [run, step]
              (NaN where a run has no value: other budgets, other eval cadence)
    attrs     source, tail_k, n_runs, package_version, created_by

The tail-mean is the mean of the last k evaluations after step 0 (k = 11, the paper's;
`mhar_probe.tail`): NaN, with `tail_k` 0, for a run that has fewer. `to_grid(ds)` pivots a
variable onto method x H x kv x lr x seed (plus any dims you name), the array the figure generators read.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import xarray as xr

from mhar_probe.errors import UserError
from mhar_probe.runfiles import METRICS, METRICS_GZ
from mhar_probe.tail import TAIL_K

from .run import Run

GRID_DIMS = ("method", "H", "kv", "lr", "seed")
RUN_COORDS = ("method", "H", "kv", "lr", "seed", "preset", "steps", "hidden_size", "layers", "corpus",
              "finished", "path")
SCALARS = ("tail_mean", "tail_k", "initial_val_loss", "final_val_loss", "flops", "tokens", "parameters")


def find_run_dirs(root: str | Path) -> list[Path]:
    """Directories under `root` (or `root` itself) that hold a metrics.jsonl (or .jsonl.gz), sorted."""
    root = Path(root)
    if not root.exists():
        raise UserError(f"runs directory {root} does not exist")
    if any((root / name).is_file() for name in (METRICS, METRICS_GZ)):
        return [root]
    found = {p.parent for name in (METRICS, METRICS_GZ) for p in root.rglob(name)
             if not any(part.startswith(".") or part == "checkpoint" for part in p.relative_to(root).parts[:-1])}
    return sorted(found)


def h_coord(heads: int | None) -> int:
    """The H coordinate of a run with `heads` routing heads: 0 for a method without them."""
    return heads or 0


def _flat(run: Run, root: Path, k: int) -> dict[str, Any]:
    """One run's coords, scalars and curves for the long form (H = 0 without routing heads)."""
    evals, train = run.evals, run.train_points
    vals = [p["val_loss"] for p in evals]
    tail = run.tail(k)
    return dict(
        run=_rel(run.path, root), path=str(run.path), method=run.method, H=h_coord(run.heads), kv=run.kv or 0,
        lr=run.lr if run.lr is not None else math.nan, seed=run.seed if run.seed is not None else -1,
        preset=str(run.preset or ""), steps=run.steps, hidden_size=run.hidden_size or 0, layers=run.layers or 0,
        corpus=run.corpus, finished=run.finished,
        tail_mean=math.nan if tail.mean is None else tail.mean, tail_k=k if tail.mean is not None else 0,
        initial_val_loss=vals[0] if vals else math.nan, final_val_loss=vals[-1] if vals else math.nan,
        flops=run.scalar("flops"), tokens=run.scalar("tokens"),
        parameters=float(run.summary.get("parameters", math.nan)),
        eval_steps=[int(p["step"]) for p in evals], val_loss=vals,
        val_flops=[float(p["flops"] if p["flops"] is not None else math.nan) for p in evals],
        train_steps=[int(r["step"]) for r in train], train_loss=[float(r["loss"]) for r in train],
        flops_at_step=[float(r.get("flops", math.nan)) for r in train],
    )


def _curve(records: list[dict[str, Any]], steps_key: str, value_key: str, index: np.ndarray) -> np.ndarray:
    pos = {int(s): i for i, s in enumerate(index)}
    out = np.full((len(records), len(index)), np.nan)
    for r, rec in enumerate(records):
        for s, v in zip(rec[steps_key], rec[value_key]):
            out[r, pos[s]] = v
    return out


def read_runs(source: str | Path | Iterable[str | Path], *, finished_only: bool = False) -> tuple[list[Run], Path]:
    """The runs under `source` (a directory, or a list of run dirs) and the root their names are
    relative to."""
    if isinstance(source, (str, Path)):
        root = Path(source)
        dirs = find_run_dirs(root)
    else:
        dirs = [Path(p) for p in source]
        root = Path(*_common_parts(dirs)) if dirs else Path(".")
    runs = [Run.read(d) for d in dirs]
    return ([r for r in runs if r.finished] if finished_only else runs), root


def load_runs(source: str | Path | Iterable[str | Path], *, k: int = TAIL_K,
              finished_only: bool = False) -> xr.Dataset:
    """The long-form dataset of every run under `source` (a directory, or a list of run dirs)."""
    runs, root = read_runs(source, finished_only=finished_only)
    return runs_dataset(runs, root, k=k)


def runs_dataset(runs: Sequence[Run], root: Path, *, k: int = TAIL_K) -> xr.Dataset:
    """`runs` as the long-form dataset (module doc); run names are paths relative to `root`."""
    from mhar_probe import __version__

    records = [_flat(r, root, k) for r in runs]
    names = [r["run"] for r in records]
    eval_index = np.array(sorted({s for r in records for s in r["eval_steps"]}), dtype=np.int64)
    step_index = np.array(sorted({s for r in records for s in r["train_steps"]}), dtype=np.int64)
    coords: dict[str, Any] = {"run": np.array(names, dtype=object), "eval_step": eval_index, "step": step_index}
    for c in RUN_COORDS:
        values = [r[c] for r in records]
        coords[c] = ("run", np.array(values, dtype=object if c in ("method", "preset", "corpus", "path") else None))
    data = {v: ("run", np.array([r[v] for r in records], dtype=float)) for v in SCALARS}
    data["val_loss"] = (("run", "eval_step"), _curve(records, "eval_steps", "val_loss", eval_index))
    data["val_flops"] = (("run", "eval_step"), _curve(records, "eval_steps", "val_flops", eval_index))
    data["train_loss"] = (("run", "step"), _curve(records, "train_steps", "train_loss", step_index))
    data["flops_at_step"] = (("run", "step"), _curve(records, "train_steps", "flops_at_step", step_index))
    ds = xr.Dataset(data, coords=coords)
    ds.attrs.update(source=str(root), tail_k=k, n_runs=len(records), package_version=__version__,
                    created_by="analysis.runs.load_runs", h_zero_means="method has no routing heads")
    return ds


def _rel(path: Path, root: Path) -> str:
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()
    return rel if rel != "." else path.name


def _common_parts(paths: Sequence[Path]) -> tuple[str, ...]:
    parts = [p.resolve().parts for p in paths]
    common = []
    for items in zip(*parts):
        if len(set(items)) != 1:
            break
        common.append(items[0])
    if len(paths) == 1:
        common = list(parts[0][:-1])
    return tuple(common) or (".",)


def select(ds: xr.Dataset, **where: Any) -> xr.Dataset:
    """Runs whose coords equal the given values (a list/tuple value means any of them)."""
    mask = np.ones(ds.sizes["run"], dtype=bool)
    for coord, value in where.items():
        values = ds[coord].values
        if isinstance(value, (list, tuple, set)):
            mask &= np.isin(values, list(value))
        elif isinstance(value, float):
            mask &= np.isclose(values.astype(float), value, rtol=1e-9, atol=0)
        else:
            mask &= values == value
    return ds.isel(run=np.flatnonzero(mask))


def to_grid(ds: xr.Dataset, var: str = "tail_mean", dims: Sequence[str] = GRID_DIMS) -> xr.DataArray:
    """Pivot `var` from the run dim onto `dims` (NaN where the grid has no run).

    Two runs landing in one cell is an error naming both: filter first (`select`) or add the
    coord that tells them apart (e.g. preset, steps, corpus) to `dims`."""
    if ds.sizes.get("run", 0) == 0:
        raise UserError("no runs to pivot")
    keys = list(zip(*(ds[d].values.tolist() for d in dims)))
    seen: dict[tuple, str] = {}
    for key, name in zip(keys, ds["run"].values.tolist()):
        if key in seen:
            raise UserError(f"runs {seen[key]} and {name} fall in the same cell {dict(zip(dims, key))}; "
                            f"select one preset/steps/corpus first or add it to the grid dims")
        seen[key] = name
    da = ds[var].reset_coords(drop=True)
    da = da.assign_coords({d: ("run", ds[d].values) for d in dims})
    return da.set_index(run=list(dims)).unstack("run").sortby(list(dims))
