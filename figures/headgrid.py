"""The kv x H grids of MHAR runs and their heatmap (paper Figures hushape b, kvh100,
heads_under): seed-averaged tail-mean per (KV, H), per-row optimum stars, the H = KV diagonal,
missing cells masked grey, an optional outlined row."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr
from matplotlib.patches import Rectangle

from analysis.runs import select

from .common import groups, scale_label
from .style import DIAGONAL_COLOR, GRID_CMAP, MISSING_COLOR, STAR_COLOR


@dataclass
class HeadGrid:
    preset: str
    corpus: str
    lr: float
    steps: int
    grid: xr.DataArray  # (kv, H) seed-averaged tail-mean, NaN where no run
    n_seeds: xr.DataArray  # (kv, H) runs per cell
    hidden_size: int | None = None  # the runs' width and depth (a plan may override its preset's)
    layers: int | None = None

    @property
    def label(self) -> str:
        """The paper's name of the scale ("100M"), or the shape where the runs override the preset's."""
        return scale_label(self.preset, self.hidden_size, self.layers)

    @property
    def cells(self) -> int:
        return int(np.isfinite(self.grid.values).sum())


def head_grids(ds: xr.Dataset) -> list[HeadGrid]:
    """Every (preset, corpus, lr, steps) group of mhar runs (attnres counts as H = 1) that
    varies H in at least one KV row, each cell averaged over the seeds every cell has (a group
    whose cells share no seed is left out)."""
    routed = select(ds, method=["mhar", "attnres"])
    out = []
    for key, sub in groups(routed, ("preset", "corpus", "lr", "steps", "hidden_size", "layers")):
        kvs = sorted(set(sub["kv"].values.tolist()))
        hs = sorted(set(sub["H"].values.tolist()))
        grid = xr.DataArray(np.full((len(kvs), len(hs)), np.nan), coords={"kv": kvs, "H": hs}, dims=("kv", "H"))
        count = xr.zeros_like(grid)
        cells = {}
        for kv in kvs:
            for h in hs:
                cell = select(sub, kv=kv, H=h, method="mhar")
                if cell.sizes["run"] == 0 and h == 1:
                    cell = select(sub, kv=kv, method="attnres")  # single-head = MHAR at H = 1
                if cell.sizes["run"]:
                    cells[kv, h] = cell
        # average only over the seeds every cell has, so no cell gets a different seed mix
        shared = set.intersection(*(set(c["seed"].values.tolist()) for c in cells.values())) if cells else set()
        if len(cells) > 1 and not shared:
            continue  # no seed in every cell: its cells would compare one seed's run with another's
        for (kv, h), cell in cells.items():
            if shared:
                cell = select(cell, seed=sorted(shared))
            grid.loc[kv, h] = float(cell["tail_mean"].mean())
            count.loc[kv, h] = cell.sizes["run"]
        if (np.isfinite(grid.values).sum(axis=1) >= 2).any():
            out.append(HeadGrid(key["preset"], key["corpus"], float(key["lr"]), int(key["steps"]), grid, count,
                                key["hidden_size"], key["layers"]))
    return out


def row_optima(grid: xr.DataArray) -> list[tuple[int, int]]:
    """(kv, H) of the lowest value in every row that has one."""
    stars = []
    for kv in grid["kv"].values:
        row = grid.sel(kv=kv).values
        if np.isfinite(row).any():
            stars.append((int(kv), int(grid["H"].values[int(np.nanargmin(row))])))
    return stars


def draw_heatmap(ax: plt.Axes, grid: xr.DataArray, *, outline_kv: int | None = None,
                 fmt: str = "{:.3f}") -> dict[str, Any]:
    """Heatmap of a (kv, H) grid on `ax`; returns what was drawn (stars, diagonal, masked cells)."""
    vals = grid.values.astype(float)
    kvs, hs = [int(v) for v in grid["kv"].values], [int(v) for v in grid["H"].values]
    cmap = plt.get_cmap(GRID_CMAP).with_extremes(bad=MISSING_COLOR)
    masked = np.ma.masked_invalid(vals)
    im = ax.imshow(masked, cmap=cmap, origin="lower", aspect="auto")
    norm = im.norm
    ax.set_xticks(range(len(hs)), [str(h) for h in hs])
    ax.set_yticks(range(len(kvs)), [str(k) for k in kvs])
    ax.set_xlabel("routing heads H")
    ax.set_ylabel("KV heads")
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    finite = vals[np.isfinite(vals)]
    mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    missing = []
    for i, kv in enumerate(kvs):
        for j, h in enumerate(hs):
            v = vals[i, j]
            if np.isfinite(v):
                color = "white" if v > mid else "black"  # crest: higher = darker
                # the number sits on a patch of its own cell colour, so the diagonal passes behind it
                ax.text(j, i - 0.22, fmt.format(v), ha="center", va="center", fontsize=6.5, color=color, zorder=6,
                        bbox=dict(boxstyle="square,pad=0.15", fc=cmap(norm(v)), ec="none"))
            else:
                missing.append((kv, h))
                ax.text(j, i, "no run", ha="center", va="center", fontsize=6, color="#6b6b6b")
    stars = row_optima(grid)
    for kv, h in stars:
        ax.scatter([hs.index(h)], [kvs.index(kv) + 0.18], marker="*", s=110, color=STAR_COLOR,
                   edgecolors="black", linewidths=0.6, zorder=4,
                   label="lowest loss of its KV row" if (kv, h) == stars[0] else "_star")
    diag = [(kv, kv) for kv in kvs if kv in hs]
    if len(diag) == 1:  # one cell: outlined, not cut by a diagonal line through it
        j, i = hs.index(diag[0][1]), kvs.index(diag[0][0])
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=DIAGONAL_COLOR, lw=1.6, ls="--",
                               zorder=3, label="H = KV"))
    elif diag:
        xs = [hs.index(h) for _, h in diag]
        ys = [kvs.index(kv) for kv, _ in diag]
        xs = [xs[0] - 0.5 * np.sign(xs[1] - xs[0])] + xs + [xs[-1] + 0.5 * np.sign(xs[-1] - xs[-2])]
        ys = [ys[0] - 0.5 * np.sign(ys[1] - ys[0])] + ys + [ys[-1] + 0.5 * np.sign(ys[-1] - ys[-2])]
        ax.plot(xs, ys, ls="--", color=DIAGONAL_COLOR, lw=1.3, zorder=3, label="H = KV")
    if outline_kv is not None and outline_kv in kvs:
        i = kvs.index(outline_kv)
        ax.add_patch(Rectangle((-0.5, i - 0.5), len(hs), 1, fill=False, edgecolor=DIAGONAL_COLOR, lw=2.0,
                               zorder=5, label=f"KV = {outline_kv}"))
    ax.set_xlim(-0.5, len(hs) - 0.5)
    ax.set_ylim(-0.5, len(kvs) - 0.5)
    cbar = ax.figure.colorbar(im, ax=ax, shrink=0.9, pad=0.02)
    cbar.set_label("tail-mean val loss (lower is better)")
    cbar.outline.set_visible(False)
    cbar.ax.tick_params(length=2, width=0.5, labelsize=6)
    return dict(stars=stars, diagonal=diag, missing=missing, outlined=outline_kv if outline_kv in kvs else None)
