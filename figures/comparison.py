"""The four-method comparison of one preset (paper Tables main and mainweb): baseline, hyper,
single-head, MHAR (and the over-split MHAR) at one LR and budget, seed-averaged, with deltas
against the same-rate baseline."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import xarray as xr

from analysis.runs import select

from .common import cell_mean, choose_mhar_H, pick_lr


@dataclass
class MethodComparison:
    preset: str
    corpus: str
    lr: float
    steps: int
    kv: int
    hidden_size: int
    layers: int
    H_main: int | None
    H_over: int | None
    loss: dict[str, float] = field(default_factory=dict)  # baseline, hyper, attnres, mhar, mhar_over
    n: dict[str, int] = field(default_factory=dict)

    def delta(self, key: str) -> float:
        return self.loss.get(key, np.nan) - self.loss.get("baseline", np.nan)


def compare_methods(ds: xr.Dataset, preset: str, corpus: str, prefer_H: int | None = None
                    ) -> MethodComparison | None:
    """The comparison at the preset's longest baseline budget and the chosen LR; None without
    a baseline and at least one other method there."""
    sub = select(ds, preset=preset, corpus=corpus)
    base = select(sub, method="baseline")
    if base.sizes["run"] == 0:
        return None
    lr = pick_lr(sub)
    steps = int(select(base, lr=lr)["steps"].max())
    sub = select(sub, lr=lr, steps=steps)
    base = select(sub, method="baseline")
    kv = int(np.bincount(base["kv"].values.astype(int)).argmax())
    width = int(np.bincount(select(base, kv=kv)["hidden_size"].values.astype(int)).argmax())
    base = select(base, kv=kv, hidden_size=width)
    seeds = sorted(set(base["seed"].values.tolist()))
    sub = select(sub, kv=kv, hidden_size=width, seed=seeds)  # the baseline's KV, width and seeds: paired cells
    mhar = select(sub, method="mhar")
    H_main = choose_mhar_H(mhar["H"].values.tolist(), kv, prefer=prefer_H)
    over = [int(h) for h in mhar["H"].values.tolist() if H_main is not None and h > H_main]
    H_over = max(over) if over else None
    cmp = MethodComparison(preset, corpus, lr, steps, kv, int(base["hidden_size"].values[0]),
                           int(base["layers"].values[0]), H_main, H_over)
    cells = dict(baseline=dict(method="baseline"), hyper=dict(method="hyper"), attnres=dict(method="attnres"))
    if H_main is not None:
        cells["mhar"] = dict(method="mhar", H=H_main)
    if H_over is not None:
        cells["mhar_over"] = dict(method="mhar", H=H_over)
    present = {key: select(sub, **where) for key, where in cells.items()}
    present = {key: runs for key, runs in present.items() if runs.sizes["run"]}
    # every cell averages the same seeds (those all present cells share), so deltas stay paired
    seeds_of = {key: set(r["seed"].values.tolist()) for key, r in present.items()}
    shared = set.intersection(*seeds_of.values()) if present else set()
    if present and not shared:  # no seed in every cell: the baseline's seed most cells have, and only them
        best = min(seeds_of["baseline"], key=lambda s: (-sum(s in v for v in seeds_of.values()), s))
        present = {key: runs for key, runs in present.items() if best in seeds_of[key]}
        shared = {best}
    for key, runs in present.items():
        value, n = cell_mean(runs, seed=sorted(shared)) if shared else cell_mean(runs)
        if n:
            cmp.loss[key], cmp.n[key] = value, n
    return cmp if len(cmp.loss) >= 2 else None
