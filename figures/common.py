"""Selections shared by the run-based generators: which corpus is the main one, which LR and
budget a comparison uses, which MHAR head count stands for "MHAR", seed-averaged cells, and
the paper's scale names."""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

import numpy as np
import xarray as xr

from analysis.runs import select

PAPER_SCALES = {"100m": "100M", "124m": "124M", "350m": "350M", "1b": "1B"}
MAIN_METHODS = ("baseline", "hyper", "attnres", "mhar")


def scale_label(preset: str, hidden_size: Any = None, layers: Any = None) -> str:
    """The paper's name of a preset ("100M"); a run whose width or depth overrides the preset's (the
    study's middle rung trains d=256, L=8 from the 100m preset) is named by its shape instead."""
    from mhar_probe.model.config import PRESETS

    shape = PRESETS.get(preset, {})
    d, L = shape.get("hidden_size"), shape.get("num_hidden_layers")
    if hidden_size is not None and layers is not None and d is not None and (int(hidden_size), int(layers)) != (d, L):
        return f"d={int(hidden_size)}, L={int(layers)}"
    return PAPER_SCALES.get(preset, preset)


def values(ds: xr.Dataset, coord: str) -> list[Any]:
    """Distinct values of a run coord, sorted."""
    return sorted(set(ds[coord].values.tolist()))


def main_corpus(ds: xr.Dataset) -> str:
    """The embedded default corpus if any run used it, else the most common corpus."""
    names = Counter(ds["corpus"].values.tolist())
    return "embedded" if "embedded" in names else names.most_common(1)[0][0]


def pick_lr(ds: xr.Dataset, prefer: float = 5e-4) -> float:
    """`prefer` (the paper's unified 5e-4) if baseline runs used it, else their most common LR."""
    base = select(ds, method="baseline")
    pool = base if base.sizes["run"] else ds
    lrs = Counter(pool["lr"].values.tolist())
    if any(np.isclose(lr, prefer) for lr in lrs):
        return float(prefer)
    return float(max(lrs, key=lambda lr: (lrs[lr], -lr)))


def choose_mhar_H(available: Iterable[int], kv: int | None, prefer: int | None = None) -> int | None:
    """The head count that stands for MHAR: `prefer` if trained (the H a study evaluates, so its
    tables and claims compare the same runs), else H = 8 (the paper's choice at scale), else H = KV,
    else the largest H <= 8 that is > 1."""
    hs = sorted(int(h) for h in available if int(h) > 1)
    if not hs:
        return None
    for want in (prefer, 8, kv):
        if want in hs:
            return int(want)
    small = [h for h in hs if h <= 8]
    return small[-1] if small else hs[0]


def cell_mean(ds: xr.Dataset, var: str = "tail_mean", **where: Any) -> tuple[float, int]:
    """Seed-averaged value of the runs matching `where`, and how many runs went in."""
    sub = select(ds, **where)
    n = sub.sizes["run"]
    return (float(sub[var].mean()) if n else float("nan")), n


def shared_seeds(ds: xr.Dataset, cells: list[dict[str, Any]]) -> list[int]:
    """Seeds present in every cell (each a `select` filter): averaging only these keeps the
    cells' differences paired by seed. Empty when the cells share none."""
    sets = [set(select(ds, **c)["seed"].values.tolist()) for c in cells]
    return sorted(set.intersection(*sets)) if sets else []


def groups(ds: xr.Dataset, by: tuple[str, ...]) -> list[tuple[dict[str, Any], xr.Dataset]]:
    """Split runs by the coords in `by` (sorted keys)."""
    keys = sorted(set(zip(*(ds[c].values.tolist() for c in by))), key=lambda k: tuple(str(x) for x in k))
    return [(dict(zip(by, k)), select(ds, **dict(zip(by, k)))) for k in keys]
