"""Many training runs as one xarray dataset, and its pivot onto the sweep grid.

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

The tail-mean is the mean of the last k evaluations (k = 11, the paper's; fewer when a run
has fewer, recorded in `tail_k`). `to_grid(ds)` pivots a variable onto method x H x kv x lr x
seed (plus any dims you name), the array the figure generators read.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import xarray as xr

from mhar_probe.errors import UserError
from mhar_probe.model.methods import routing_heads_of
from mhar_probe.tail import TAIL_K, tail_mean

GRID_DIMS = ("method", "H", "kv", "lr", "seed")
RUN_COORDS = ("method", "H", "kv", "lr", "seed", "preset", "steps", "hidden_size", "layers", "corpus",
              "finished", "path")
SCALARS = ("tail_mean", "tail_k", "initial_val_loss", "final_val_loss", "flops", "tokens", "parameters")


def find_run_dirs(root: str | Path) -> list[Path]:
    """Directories under `root` (or `root` itself) that hold a metrics.jsonl, sorted."""
    root = Path(root)
    if not root.exists():
        raise UserError(f"runs directory {root} does not exist")
    if (root / "metrics.jsonl").is_file():
        return [root]
    found = [p.parent for p in root.rglob("metrics.jsonl")
             if not any(part.startswith(".") or part == "checkpoint" for part in p.relative_to(root).parts[:-1])]
    return sorted(found)


def _json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from exc
    return doc if isinstance(doc, dict) else {}


def _metrics(path: Path) -> list[dict[str, Any]]:
    rows = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
    return rows


def _preset_value(preset: str | None, key: str) -> Any:
    from mhar_probe.model.config import PRESETS

    return PRESETS.get(preset or "", {}).get(key)


def read_run(run_dir: Path, *, k: int = TAIL_K) -> dict[str, Any]:
    """One run as a flat record: axes, scalars and its curves (lists)."""
    tc, summary, hf = _json(run_dir / "train_config.json"), _json(run_dir / "summary.json"), _json(run_dir / "config.json")
    corpus = _json(run_dir / "corpus.json")
    method = summary.get("method") or tc.get("method") or hf.get("residual_method")
    if method is None:
        raise UserError(f"{run_dir}: no method recorded (train_config.json and summary.json missing)")
    preset = summary.get("preset") or tc.get("preset")
    extra = tc.get("extra") or {}
    kv = summary.get("kv_heads") or tc.get("kv_heads") or hf.get("num_key_value_heads") \
        or extra.get("num_key_value_heads") or _preset_value(preset, "num_key_value_heads")
    H = routing_heads_of(method, summary, tc, hf, default=kv)  # None: the method has no routing heads
    rows = _metrics(run_dir / "metrics.jsonl")
    evals = sorted((r for r in rows if r.get("val_loss") is not None), key=lambda r: r["step"])
    train = sorted((r for r in rows if r.get("loss") is not None), key=lambda r: r["step"])
    vals = [float(r["val_loss"]) for r in evals]
    tail, tail_k = tail_mean(vals, k)
    last = rows[-1] if rows else {}
    return dict(
        name=run_dir.name, path=str(run_dir), method=str(method), H=int(H or 0), kv=int(kv or 0),
        lr=float(summary.get("lr") or tc.get("lr") or math.nan), seed=int(summary.get("seed", tc.get("seed", -1))),
        preset=str(preset or ""), steps=int(summary.get("steps") or tc.get("steps") or last.get("step", 0)),
        hidden_size=int(hf.get("hidden_size") or extra.get("hidden_size") or _preset_value(preset, "hidden_size") or 0),
        layers=int(hf.get("num_hidden_layers") or extra.get("num_hidden_layers")
                   or _preset_value(preset, "num_hidden_layers") or 0),
        corpus=str(corpus.get("name") or tc.get("corpus") or "embedded"),
        finished=bool(summary.get("finished", False)),
        tail_mean=tail, tail_k=tail_k,
        initial_val_loss=vals[0] if vals else math.nan, final_val_loss=vals[-1] if vals else math.nan,
        flops=float(summary.get("flops", last.get("flops", math.nan))),
        tokens=float(summary.get("tokens", last.get("tokens", math.nan))),
        parameters=float(summary.get("parameters", math.nan)),
        eval_steps=[int(r["step"]) for r in evals], val_loss=vals,
        val_flops=[float(r.get("flops", math.nan)) for r in evals],
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


def load_runs(source: str | Path | Iterable[str | Path], *, k: int = TAIL_K,
              finished_only: bool = False) -> xr.Dataset:
    """The long-form dataset of every run under `source` (a directory, or a list of run dirs)."""
    from mhar_probe import __version__

    if isinstance(source, (str, Path)):
        root = Path(source)
        dirs = find_run_dirs(root)
    else:
        dirs = [Path(p) for p in source]
        root = Path(*_common_parts(dirs)) if dirs else Path(".")
    records = [read_run(d, k=k) for d in dirs]
    if finished_only:
        records = [r for r in records if r["finished"]]
    names = [_rel(Path(r["path"]), root) for r in records]
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
