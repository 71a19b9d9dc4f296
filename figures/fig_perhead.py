"""Per-head deviation maps (paper Figure perhead): for an MHAR run, each head's token-mean
routing minus the head consensus, D_h = wbar_h - wbar, at the first ten routing sites; one panel
per head, a diverging map centred at 0, dark cells for sources a site cannot yet read. The
caption line gives max |D| against a matched-norm random query, the split-half replication r
and the cross-head correlation (analysis.probes.per_head_deviation), beside the paper's."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import TwoSlopeNorm

from analysis.probes import per_head_deviation
from mhar_probe.model.methods import run_label

from .registry import Output, Skip, generator
from .routing import Captured, load_captured, load_paper_routing, pick
from .style import FULL, UNREACHABLE, new_figure, paper_style

NEEDS = ("a captured MHAR run (H > 1) with probes (mhar capture RUN, without --no-probes); a delta-form "
         "model (mhar convert / mhar import) with H > 1 gets its own map")
#: the multi-head methods drawn: the from-scratch replacement form and the delta form
METHODS = ("mhar", "delta")
FIRST_SITES = 10
DIVERGING = "vlag"  # seaborn blue-white-red, colour-blind safe, white at 0
MAX_COLS = 4


def perhead_runs(ctx) -> list[Captured]:
    """One run per multi-head method and model shape (mhar: the chosen H; lowest seed) that has the
    probe sums: MHAR runs, and delta-form models (converted or imported, e.g. the released 8B)."""
    runs = [c for c in load_captured(ctx.routing_datasets()) if c.method in METHODS and c.H > 1 and c.has_probes]
    chosen = {}
    for method, shape in sorted({(c.method, c.shape) for c in runs}):
        chosen[method, shape] = pick(runs, method, shape=shape, prefer=ctx.mhar_heads)
    if not chosen:
        raise Skip("no captured multi-head (mhar, H > 1) run with probes", [NEEDS])
    return list(chosen.values())


def shown_cells(c: Captured, first_sites: int = FIRST_SITES) -> tuple[int, int]:
    """(sites, sources) drawn: the first ten sites and every source they can read."""
    S = min(first_sites, c.ds.sizes["site"])
    return S, int(c.ds.site_num_sources.values[:S].max())


def _halves_words(stats) -> str:
    """How the replication halves were split, in the caption's words."""
    return ("halves of whole documents: disjoint text" if str(stats.attrs.get("halves", "")).startswith("documents")
            else "halves of alternate rows: the same documents")


def caption(stats, paper: dict) -> str:
    null = f"{float(stats.null_max_abs_mean):.3f}"
    if np.isfinite(float(stats.null_max_abs_std)):
        null += f" ± {float(stats.null_max_abs_std):.3f}"
    return (f"Grey: source not yet available. max |D| = {float(stats.max_abs):.3f} vs {null} under a matched-norm "
            f"random query; replication r = {float(stats.replication_r):.2f}\n({_halves_words(stats)}); "
            f"mean cross-head r = {float(stats.cross_head_corr_mean):.2f} (tied to "
            f"{float(stats.cross_head_corr_independent):.2f} by sum_h D_h = 0);\nspread of cross-head r = "
            f"{float(stats.cross_head_spread):.2f} vs {float(stats.cross_head_spread_null_mean):.2f} "
            f"± {float(stats.cross_head_spread_null_std):.2f} for random-query heads.\n"
            f"Paper ({paper['scale'].upper()}): ±{paper['max_abs']} vs {paper['null_max_abs']}, r = {paper['replication_r']}.")


@generator("perhead", kind="figure", paper_ref="fig:perhead", needs=NEEDS)
def make(ctx) -> list[Output]:
    paper = load_paper_routing()["perhead"]
    outputs = []
    runs = perhead_runs(ctx)
    for c in runs:
        stats = per_head_deviation(c.ds, FIRST_SITES)
        S, N = shown_cells(c)
        D = stats.deviation.values[:S, :N, :]  # [site, source, head], NaN unreachable
        H = D.shape[-1]
        lim = float(np.nanmax(np.abs(D))) or 1e-6
        norm = TwoSlopeNorm(vcenter=0.0, vmin=-lim, vmax=lim)
        cmap = plt.get_cmap(DIVERGING).with_extremes(bad=UNREACHABLE)
        ncols = min(H, MAX_COLS)
        nrows = math.ceil(H / ncols)
        sites = [str(x) for x in c.ds.site_label.values[:S]]
        sources = [str(x) for x in c.ds.source_label.values[:N]]
        with paper_style():
            fig, axes = new_figure(FULL, 0.08 + nrows * (0.07 + 0.024 * S), nrows=nrows, ncols=ncols,
                                   sharex=True, sharey=True, squeeze=False)
            for h, ax in enumerate(axes.flat):
                if h >= H:
                    ax.set_visible(False)
                    continue
                im = ax.imshow(np.ma.masked_invalid(D[..., h]), cmap=cmap, norm=norm, aspect="auto",
                               interpolation="nearest")
                ax.set_title(f"head {h}", loc="left")
                ax.set_yticks(range(S), sites)
                ax.set_xticks(range(N), sources, rotation=60)
                ax.tick_params(length=0)
                ax.spines[:].set_visible(False)
            for ax in axes[-1]:
                ax.set_xlabel("source")
            for ax in axes[:, 0]:
                ax.set_ylabel("routing site")
            cbar = fig.colorbar(im, ax=list(axes.flat), shrink=0.85, pad=0.01)
            cbar.set_label(r"$\bar w_h - \bar w$")
            cbar.outline.set_visible(False)
            fig.suptitle(f"Per-head deviation from the head consensus ({run_label(c.method, c.H, 'display')}, "
                         f"{c.scale})",
                         x=0.0, ha="left", fontsize=8.5, fontweight="bold")
            text = caption(stats, paper)
            fig.supxlabel(text, x=0.0, ha="left", fontsize=6.5, color="#333333")
            name = "perhead" if len(runs) == 1 else f"perhead_{c.name}"
            paths = ctx.save_figure(fig, name)
        outputs.append(Output(name, paths, dict(deviation=D, stats=stats, run=c.name), [text.replace("\n", " ")]))
    return outputs
