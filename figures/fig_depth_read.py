"""Depth-read pictures from captured routing weights (paper Figures arch and teaser).

depth_read (fig:arch): at one routing site, the [source, channel] matrix of how strongly each
channel reads each depth row, for the standard pre-norm residual (a one-hot read of the latest
state, the reference), a single-head run (every column identical: rank 1) and an MHAR run
(H blocks of identical columns).
depth_map (fig:teaser): the site x source token-mean weight (mean over heads) of those runs,
unreachable cells dark.
"""

from __future__ import annotations

import warnings

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import Normalize

from mhar_probe.model.methods import run_label

from .registry import Output, Skip, generator
from .routing import Captured, default_site, depth_read_matrix, load_captured, pick, prenorm_read_matrix
from .style import FULL, UNREACHABLE, WEIGHT_CMAP, new_figure, paper_style

NEEDS = "captured attnres and/or mhar runs (mhar capture RUN writes RUN/routing.nc)"
MAX_TICKS = 16


def routed_pair(ctx) -> list[Captured]:
    """The single-head and the MHAR run the pictures show (those present), same shape when possible."""
    runs = [c for c in load_captured(ctx.routing_datasets()) if c.method in ("attnres", "mhar")]
    single = pick(runs, "attnres")
    mhar = pick(runs, "mhar", shape=single.shape, prefer=ctx.mhar_heads) if single else None
    mhar = mhar or pick(runs, "mhar", prefer=ctx.mhar_heads)
    chosen = [c for c in (single, mhar) if c is not None]
    if not chosen:
        raise Skip("no captured attnres or mhar run", [NEEDS])
    return chosen


def _ticks(ax, axis: str, labels: list[str]) -> None:
    step = max(1, int(np.ceil(len(labels) / MAX_TICKS)))
    idx = list(range(0, len(labels), step))
    (ax.set_yticks if axis == "y" else ax.set_xticks)(idx, [labels[i] for i in idx])


def numeric_rank(m: np.ndarray, rtol: float = 1e-6) -> int:
    s = np.linalg.svd(m, compute_uv=False)
    return int((s > rtol * s[0]).sum()) if s.size and s[0] > 0 else 0


@generator("depth_read", kind="figure", paper_ref="fig:arch (bottom row), fig:teaser (zooms)", needs=NEEDS)
def make_depth_read(ctx) -> list[Output]:
    chosen = routed_pair(ctx)
    ref = chosen[0]
    site = default_site(ref.ds)
    n = int(ref.ds.site_num_sources.values[site])
    d = int(ref.ds.attrs["d"])
    labels = [str(x) for x in ref.ds.source_label.values[:n]]
    panels = [("Standard pre-norm", "one-hot read of the latest state", prenorm_read_matrix(n, d), 1)]
    for c in chosen:
        s = default_site(c.ds)
        m = depth_read_matrix(c.ds, s)
        heads = int(c.ds.site_num_heads.values[s])
        what = "one query: identical columns" if heads == 1 else f"{heads} heads: block-wise columns"
        panels.append((run_label(c.method, c.H, "display"), what, m, heads))
    vmax = max(float(np.nanmax(m)) for _, _, m, _ in panels[1:])
    norm = Normalize(0.0, vmax)
    with paper_style():
        fig, axes = new_figure(FULL, 0.3 + 0.02 * n, ncols=len(panels), sharey=True)
        for k, (ax, (title, sub, m, heads)) in enumerate(zip(np.atleast_1d(axes), panels)):
            im = ax.imshow(m, cmap=WEIGHT_CMAP, norm=norm, aspect="auto", interpolation="nearest")
            ax.set_title(f"{title}\n{sub}", loc="left", fontsize=7)
            ax.set_xlabel(f"channel c (d = {m.shape[1]})")
            ax.set_xticks([0, m.shape[1] - 1], ["0", str(m.shape[1] - 1)])
            for b in range(1, heads):  # head boundaries
                ax.axvline(b * m.shape[1] // heads - 0.5, color="white", lw=0.5, alpha=0.8)
            if k > 0 and m.shape[0] <= MAX_TICKS and heads <= 8:  # the routed panels' weights
                annotate_blocks(ax, m, heads, norm)
        axes[0].set_ylabel(f"depth row (site {ref.ds.site_label.values[site]})")
        _ticks(axes[0], "y", labels)
        cbar = fig.colorbar(im, ax=list(np.atleast_1d(axes)), shrink=0.9, pad=0.01)
        cbar.set_label("read weight (pre-norm: 1)")
        cbar.outline.set_visible(False)
        paths = ctx.save_figure(fig, "depth_read")
    data = {title: dict(matrix=m, rank=numeric_rank(m), heads=heads) for title, _, m, heads in panels}
    notes = [f"{t}: numeric rank {v['rank']}" for t, v in data.items()]
    notes.append("pre-norm row n = running state after source n; routed rows = the sources themselves")
    return [Output("depth_read", paths, dict(panels=data, runs=[c.name for c in chosen], site=site), notes)]


def annotate_blocks(ax, m: np.ndarray, heads: int, norm: Normalize) -> None:
    """Write each (row, head block) weight at the block's centre, dark text on light cells."""
    cmap = plt.get_cmap(WEIGHT_CMAP)
    width = m.shape[1] // heads
    for i in range(m.shape[0]):
        for h in range(heads):
            v = float(m[i, h * width])
            r, g, b, _ = cmap(norm(v))
            ax.text(h * width + (width - 1) / 2, i, f"{v:.2f}", ha="center", va="center", fontsize=6,
                    color="black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white")


def head_mean_map(c: Captured) -> np.ndarray:
    """[site, source] token-mean weight averaged over the heads each site has; NaN unreachable."""
    w = c.ds.weight_mean.values
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells: mean of nothing is NaN
        return np.nanmean(w, axis=-1)


@generator("depth_map", kind="figure", paper_ref="fig:teaser (left), fig:arch", needs=NEEDS)
def make_depth_map(ctx) -> list[Output]:
    chosen = routed_pair(ctx)
    maps = [head_mean_map(c) for c in chosen]
    S, N = maps[0].shape
    annotate = S * N <= 160
    cmap = plt.get_cmap(WEIGHT_CMAP).with_extremes(bad=UNREACHABLE)
    with paper_style():
        fig, axes = new_figure(FULL, min(0.9, 0.2 + 0.035 * S), ncols=len(chosen))
        axes = np.atleast_1d(axes)
        for ax, c, m in zip(axes, chosen, maps):
            im = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, vmin=0, vmax=1, aspect="auto",
                           interpolation="nearest")
            # label and scale on two lines: at 25 sites a panel is too narrow for one
            ax.set_title(f"{run_label(c.method, c.H, 'display', note='head mean')}\n{c.scale}", loc="left")
            _ticks(ax, "y", [str(x) for x in c.ds.site_label.values])
            _ticks(ax, "x", [str(x) for x in c.ds.source_label.values])
            ax.tick_params(axis="x", rotation=60)
            ax.set_xlabel("source (depth history)")
            ax.set_ylabel("routing site")
            if annotate:
                for i, j in zip(*np.nonzero(np.isfinite(m))):
                    ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=5.5,
                            color="white" if m[i, j] > 0.55 else "black")
        cbar = fig.colorbar(im, ax=list(axes), shrink=0.9, pad=0.01)
        cbar.set_label("token-mean weight (grey: not yet available)")
        cbar.outline.set_visible(False)
        paths = ctx.save_figure(fig, "depth_map")
    return [Output("depth_map", paths, dict(maps={c.name: m for c, m in zip(chosen, maps)}),
                   [f"{c.name}: {c.method}, H={c.H}, {c.scale}, {int(c.ds.attrs.get('tokens_seen', 0))} tokens"
                    for c in chosen])]
