"""Views of a study folder that its notebook draws (notebooks/06_study100m.ipynb), beside the
registered generators that `mhar figures` makes (this module registers none, so a study's
committed figure set does not change):

- held-out loss against tokens seen, every run present, each finished run's tail-mean window
  marked: the span of its last k evaluations and their mean, tail_mean = mean(v[-k:]) (k = 11);
- one routing dataset's depth maps: the token-mean weight wbar_h(s, n) per site s x source n,
  the head mean, the spread across heads (sd_h wbar_h) and one panel per head;
- per-site depth-read spread against uniform, TV(s) = 1/2 sum_n |wbar(s, n) - 1/N_s|, of the
  trained heads beside the matched-norm random-query null (computed by the caller with the claim
  table's own `depth_spread`);
- the per-head deviation statistics (max |D|, split-half r, cross-head spread) against their
  null draws, from `analysis.probes.per_head_deviation`.

Each function returns the figure and the numbers it shows, so a test can check what is drawn.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import matplotlib.pyplot as plt
from matplotlib.colors import TwoSlopeNorm
from matplotlib.ticker import FixedLocator, FormatStrFormatter, NullFormatter
import numpy as np
import xarray as xr

from analysis.run import Run
from mhar_probe.tail import TAIL_K

from .style import FULL, OKABE_ITO, UNREACHABLE, WEIGHT_CMAP, method_color, method_label, new_figure

LINESTYLES = ("-", ":", "--", "-.")
TAIL_ZOOM = 0.4  # the right panel shows the last 40% of the tokens (the paper's inset: 12K-20K of 20K)


@dataclass(frozen=True)
class Curve:
    """One run's held-out curve as drawn: tokens [E], val_loss [E], and its tail window."""

    label: str
    tokens: np.ndarray
    val_loss: np.ndarray
    finished: bool
    tail_mean: float  # NaN for an unfinished run (no tail-mean is read from a cut-off curve)
    tail_tokens: tuple[float, float] | None  # first and last token count of the window


def run_label(run: Run, group: str = "") -> str:
    """'MHAR H=8, lr 5e-4, s0 (rerun)': a run as the legend names it."""
    heads = f" H={run.heads}" if run.method.startswith("mhar") and run.heads else ""
    lr = f"{run.lr:.0e}".replace("e-0", "e-") if run.lr is not None else "?"
    return f"{method_label(run.method)}{heads}, lr {lr}, s{run.seed}" + (f" ({group})" if group else "")


def curve_of(run: Run, label: str, k: int = TAIL_K) -> Curve:
    """The evaluation points of `run` against tokens seen; its tail window where it finished."""
    evals = [p for p in run.evals if p["tokens"] is not None]
    tokens = np.array([p["tokens"] for p in evals], dtype=float)  # [E]
    loss = np.array([p["val_loss"] for p in evals], dtype=float)  # [E]
    tail = run.tail(k).mean  # (`mhar_probe.tail`: None for a run too short for it)
    if not run.finished or tail is None or len(evals) < k:
        return Curve(label, tokens, loss, run.finished, math.nan, None)
    return Curve(label, tokens, loss, True, tail, (float(tokens[-k]), float(tokens[-1])))


def epoch_boundaries(runs: Sequence[Run], end_tokens: float) -> list[float]:
    """Token counts at which the runs start a new pass over their training split (k x train_tokens,
    from the finished runs' summaries), when every finished run records the same split; else none."""
    sizes = {int(r.summary["train_tokens"]) for r in runs if r.finished and r.summary.get("train_tokens")}
    if len(sizes) != 1:
        return []
    size = sizes.pop()
    return [k * size for k in range(1, int(end_tokens // size) + 1)]


def epoch_jumps(c: Curve, boundaries: Sequence[float]) -> list[tuple[float, float]]:
    """(boundary, change) for each epoch start inside the curve: the held-out loss at the first
    evaluation after the boundary minus the last one before it (a rise where the loss jumps)."""
    out = []
    for b in boundaries:
        before, after = np.flatnonzero(c.tokens < b), np.flatnonzero(c.tokens >= b)
        if before.size and after.size:
            out.append((float(b), float(c.val_loss[after[0]] - c.val_loss[before[-1]])))
    return out


def loss_curves(runs: Sequence[tuple[Run, str]], title: str, k: int = TAIL_K) -> tuple[plt.Figure, list[Curve]]:
    """Held-out loss vs tokens for `runs` ((run, group) pairs: the group, e.g. "rerun", sets the
    line style), full length on the left (log loss axis) and the last 40% of tokens on the right,
    where each finished run's last k evaluations are shaded and their mean drawn across them.
    Thin vertical lines: the starts of each new pass over the training split (epochs)."""
    groups = list(dict.fromkeys(group for _, group in runs))
    curves = [curve_of(run, run_label(run, group), k) for run, group in runs]
    fig, (full, zoom) = new_figure(FULL, 0.5, ncols=2)
    end = max(float(c.tokens[-1]) for c in curves if c.tokens.size)
    start = end * (1 - TAIL_ZOOM)
    tail_vals, windows = [], set()
    for (run, group), c in zip(runs, curves):
        color, style = method_color(run.method), LINESTYLES[groups.index(group) % len(LINESTYLES)]
        label = c.label + (f": tail-mean {c.tail_mean:.4f}" if c.finished
                           else f": stopped at {c.tokens[-1] / 1e6:.0f}M, no tail-mean")
        for ax in (full, zoom):
            ax.plot(c.tokens / 1e6, c.val_loss, color=color, ls=style, lw=1.1 if c.finished else 0.9,
                    alpha=1.0 if c.finished else 0.75, label=label if ax is full else None)
        tail_vals += c.val_loss[c.tokens >= start].tolist()
        if c.tail_tokens is not None:
            t0, t1 = (t / 1e6 for t in c.tail_tokens)
            windows.add((t0, t1))
            zoom.hlines(c.tail_mean, t0, t1, color=color, lw=2.6, alpha=0.9, zorder=4)
    for t0, t1 in sorted(windows):
        zoom.axvspan(t0, t1, color="#9A9A9A", alpha=0.18, lw=0)
    epochs = epoch_boundaries([r for r, _ in runs], end)
    for i, t in enumerate(epochs):
        for ax in (full, zoom):
            ax.axvline(t / 1e6, color="#9A9A9A", lw=0.6, ls=(0, (2, 2)), zorder=0,
                       label="new pass over the training text" if ax is full and i == 0 else None)
    full.set_yscale("log")
    full.yaxis.set_major_locator(FixedLocator([2, 3, 4, 6, 9]))
    full.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    full.yaxis.set_minor_formatter(NullFormatter())
    full.set_xlabel("tokens seen (M)")
    full.set_ylabel("held-out loss (nats/token)")
    full.set_title(title, loc="left")
    if tail_vals:
        lo, hi = min(tail_vals), max(tail_vals)
        pad = 0.1 * (hi - lo or 1e-3)
        zoom.set_ylim(lo - pad, hi + pad)
    zoom.set_xlim(start / 1e6, end / 1e6 * 1.005)
    zoom.set_xlabel("tokens seen (M)")
    zoom.set_ylabel("held-out loss")
    zoom.set_title(f"last {TAIL_ZOOM:.0%}; shaded: the last {k} evaluations, bar: their mean", loc="left",
                   fontweight="normal", fontsize=7)
    fig.legend(*full.get_legend_handles_labels(), loc="outside lower left", ncol=2, fontsize=6.5)
    return fig, curves


def _grid(n: int, max_cols: int = 5) -> tuple[int, int]:
    cols = min(n, max_cols)
    return math.ceil(n / cols), cols


def head_depth_maps(ds: xr.Dataset, title: str, clip: float | None = None
                    ) -> tuple[plt.Figure, dict[str, np.ndarray]]:
    """Depth maps of one routing dataset against uniform: r_h(s, n) = log2(N_s wbar_h(s, n)), the
    token-mean weight of head h at site s on source n relative to the zero-initialised query's
    uniform 1/N_s (0: uniform, +1: twice it, -1: half), for the head mean, each head, and the sd
    across heads of N_s wbar_h (in units of uniform). Colours clip at +-`clip` (default: the 99th
    percentile of |r_h|, rounded up to 0.25, so one extreme cell does not wash out the rest); dark
    cells: a source the site cannot read yet. (Raw weights lose every deep site: 1/N_s falls from
    1/2 to 1/25.)"""
    w = ds["weight_mean"].values  # [site, source, head], NaN where a site cannot read the source
    n_src = ds["site_num_sources"].values.astype(float)  # [site]
    H = w.shape[-1]
    ratio = w * n_src[:, None, None]  # [site, source, head]: 1 = uniform
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # unreachable cells: mean of nothing, log of NaN
        mean = np.log2(np.nanmean(ratio, axis=-1))  # [site, source]
        per_head = np.log2(ratio)  # [site, source, head]
        sd = np.nanstd(ratio, axis=-1) if H > 1 else None  # [site, source]
    if clip is None:
        finite = np.abs(per_head[np.isfinite(per_head)])
        clip = max(0.25, math.ceil(float(np.percentile(finite, 99)) * 4) / 4) if finite.size else 1.0
    panels = [("head mean", mean)] + ([("sd over heads", sd)] if sd is not None else [])
    panels += [(f"head {h}", per_head[..., h]) for h in range(H)] if H > 1 else []
    rows, cols = _grid(len(panels))
    fig, axes = new_figure(FULL, 0.25 * rows + 0.1, nrows=rows, ncols=cols, sharex=True, sharey=True,
                           squeeze=False)
    cmap = plt.get_cmap("vlag").with_extremes(bad=UNREACHABLE)  # blue below uniform, red above
    sd_cmap = plt.get_cmap("rocket_r").with_extremes(bad=UNREACHABLE)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-clip, vmax=clip)
    sd_max = float(np.nanmax(sd)) if sd is not None else 1.0
    sites, sources = [str(x) for x in ds["site_label"].values], [str(x) for x in ds["source_label"].values]
    step = max(1, math.ceil(len(sites) / 7))
    im = im_sd = None
    for ax, (name, m) in zip(axes.flat, panels):
        if name.startswith("sd"):
            im_sd = ax.imshow(np.ma.masked_invalid(m), cmap=sd_cmap, vmin=0, vmax=sd_max, aspect="auto",
                              interpolation="nearest")
        else:
            im = ax.imshow(np.ma.masked_invalid(np.clip(m, -clip, clip)), cmap=cmap, norm=norm, aspect="auto",
                           interpolation="nearest")
        ax.set_title(name, loc="left", fontsize=7)
        ax.set_yticks(range(0, len(sites), step), sites[::step])
        ax.set_xticks(range(0, len(sources), step), sources[::step], rotation=90)
        ax.tick_params(length=0, labelsize=5.5)
        ax.spines[:].set_visible(False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    cbar = fig.colorbar(im, ax=list(axes.flat), shrink=0.8, pad=0.01, extend="both")
    cbar.set_label("log2(N x weight): 0 = uniform 1/N", fontsize=6.5)
    cbar.outline.set_visible(False)
    if im_sd is not None:
        cbar = fig.colorbar(im_sd, ax=list(axes.flat), shrink=0.8, pad=0.01)
        cbar.set_label("sd across heads of N x weight", fontsize=6.5)
        cbar.outline.set_visible(False)
    fig.suptitle(title, x=0.0, ha="left", fontsize=8.5, fontweight="bold")
    fig.supxlabel("source (depth history)", fontsize=7)
    fig.supylabel("routing site", fontsize=7)
    return fig, dict(mean=mean, per_head=per_head, sd=sd if sd is not None else np.array([]), clip=np.array(clip))


def spread_by_site(sites: Sequence[str], trained: np.ndarray, null: np.ndarray, title: str) -> plt.Figure:
    """Per-site spread from uniform: each head's (thin), their mean (bold) and the null's mean with
    +-2 sd over draws (band). trained [site, head], null [draw, site] (head-averaged per draw)."""
    fig, ax = new_figure(FULL, 0.34)
    x = np.arange(len(sites))
    for h in range(trained.shape[1]):
        ax.plot(x, trained[:, h], color=method_color("mhar"), lw=0.6, alpha=0.35,
                label="each head" if h == 0 else None)
    ax.plot(x, trained.mean(axis=1), color=method_color("mhar"), lw=1.8, marker="o", ms=2.5, label="head mean")
    if null.size:
        mu, sd = null.mean(axis=0), null.std(axis=0, ddof=1) if null.shape[0] > 1 else np.zeros(null.shape[1])
        ax.fill_between(x, mu - 2 * sd, mu + 2 * sd, color=OKABE_ITO["black"], alpha=0.15, lw=0,
                        label=f"random queries (mean ± 2 sd, {null.shape[0]} draws)")
        ax.plot(x, mu, color=OKABE_ITO["black"], lw=0.8, ls="--")
    ax.axhline(0, color="#888888", lw=0.6)
    step = max(1, math.ceil(len(sites) / 25))
    ax.set_xticks(x[::step], list(sites)[::step], rotation=60)
    ax.set_ylabel("TV from uniform 1/N")
    ax.set_xlabel("routing site (sites with >= 2 sources)")
    ax.set_title(title, loc="left")
    ax.legend(loc="upper right", fontsize=6.5)
    return fig


def deviation_nulls(stats: xr.Dataset, title: str, paper: dict[str, Any] | None = None
                    ) -> tuple[plt.Figure, dict[str, Any]]:
    """Three panels: the trained heads' max |D|, split-half r and cross-head spread (vertical
    line) against the histogram of the same under each matched-norm random-query draw; `paper`
    (figures/paper_values_routing.json's "perhead") adds the paper's numbers as a caption."""
    rows = [("max |D|", "max_abs", "null_max_abs", "null_max_abs"),
            ("split-half r", "replication_r", "null_replication_r", "null_replication_r"),
            ("spread of cross-head r", "cross_head_spread", "cross_head_spread_null", "cross_head_spread_null")]
    fig, axes = new_figure(FULL, 0.3, ncols=3)
    shown = {}
    for ax, (name, value, null, summary) in zip(axes, rows):
        v = float(stats[value])
        draws = np.atleast_1d(stats[null].values).astype(float) if null in stats else np.array([np.nan])
        draws = draws[np.isfinite(draws)]
        # z as the claim table reads it: the statistics' own null mean and sd over draws
        mu, sd = float(stats[f"{summary}_mean"]), float(stats[f"{summary}_std"])
        z = (v - mu) / sd if np.isfinite(sd) and sd > 0 else math.nan
        if draws.size:
            ax.hist(draws, bins=min(20, max(5, draws.size // 3)), color="#9A9A9A", label=f"null ({draws.size} draws)")
        else:
            ax.text(0.5, 0.5, "no null draws recorded", transform=ax.transAxes, ha="center", fontsize=7)
        ax.axvline(v, color=method_color("mhar"), lw=2, label="trained heads")
        ax.set_title(f"{name}\n{v:.3f}" + (f", z = {z:+.1f}" if np.isfinite(z) else ""), loc="left",
                     fontsize=7, fontweight="normal")
        ax.set_yticks([])
        ax.spines["left"].set_visible(False)
        shown[value] = dict(value=v, draws=draws, z=z)
    axes[0].legend(loc="upper right", fontsize=6)
    fig.suptitle(title, x=0.0, ha="left", fontsize=8.5, fontweight="bold")
    if paper:
        fig.supxlabel(f"z against the null draws' mean and sd. Paper ({str(paper['scale']).upper()}): max |D| "
                      f"{paper['max_abs']} against {paper['null_max_abs']} for random queries; split-half r "
                      f"{paper['replication_r']}.", x=0.0, ha="left", fontsize=6.5, color="#333333")
    return fig, shown

