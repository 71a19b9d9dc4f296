"""Table mainweb: the same four-method comparison on every other corpus you trained on, with
MHAR's compute-equivalent gain (power law fitted to the lower envelope of that corpus's
baseline curves, loss vs training FLOPs; analysis.stats.ceg)."""

from __future__ import annotations

import math

import numpy as np

from analysis.runs import select
from analysis.stats.ceg import ceg, fit_power_law, lower_envelope
from analysis.stats.errors import StatsError

from .common import main_corpus, scale_label, values
from .comparison import compare_methods
from .registry import Output, Skip, generator
from .tab_main import method_cells, paper_row
from .tables import Cell, Table

KEYS = ("baseline", "hyper", "attnres", "mhar")
NEEDS = "the four-method comparison on a second corpus (mhar sweep --corpus FILE ...)"
COLUMNS = ["Scale", "d/L/KV (H)", "Baseline", "Hyper-conn.", "Single-head", "MHAR", "CEG (FLOPs)"]


def envelope_fit(ds, corpus: str):
    """Power law on the lower envelope of the corpus's baseline validation curves."""
    base = select(ds, method="baseline", corpus=corpus)
    curves = []
    for i in range(base.sizes["run"]):
        c, y = base["val_flops"].isel(run=i).values, base["val_loss"].isel(run=i).values
        ok = np.isfinite(c) & np.isfinite(y) & (c > 0)
        if ok.sum() >= 2:
            curves.append((c[ok], y[ok]))
    C, L = lower_envelope(curves)
    return fit_power_law(C, L)


@generator("table_web", kind="table", paper_ref="tab:mainweb", needs=NEEDS)
def make(ctx) -> list[Output]:
    ds = ctx.runs
    main = main_corpus(ds)
    others = [c for c in values(ds, "corpus") if c != main]
    if not others:
        raise Skip(f"all runs use one corpus ({main})", [NEEDS])
    t = Table("table_web", "Validation loss (tail-mean) on further corpora, with MHAR's compute-equivalent gain",
              COLUMNS)
    data = {}
    for corpus in others:
        try:
            fit = envelope_fit(ds, corpus)
        except StatsError as exc:
            fit, why = None, str(exc)
        for preset in values(select(ds, corpus=corpus), "preset"):
            c = compare_methods(ds, preset, corpus, ctx.mhar_heads)
            if c is None:
                continue
            gain = math.nan
            if fit is not None and "mhar" in c.loss:
                f_base = float(select(ds, corpus=corpus, preset=preset, method="baseline", lr=c.lr)["flops"].mean())
                f_mhar = float(select(ds, corpus=corpus, preset=preset, method="mhar", H=c.H_main, lr=c.lr)["flops"].mean())
                try:
                    gain = ceg(c.loss["baseline"], c.loss["mhar"], fit.alpha, routing_fraction=f_mhar / f_base - 1)
                except StatsError:  # e.g. a non-positive exponent from a flat envelope
                    gain = math.nan
            arch = f"{c.hidden_size}/{c.layers}/{c.kv} ({c.H_main or '-'})"
            t.add([Cell(f"{scale_label(preset)}, {corpus}", preset), Cell(arch, arch), *method_cells(c.loss, KEYS),
                   Cell.num(gain, "{:.2f}", suffix="x")], rule_before=bool(t.rows))
            data[(corpus, preset)] = dict(comparison=c, ceg=gain, alpha=fit.alpha if fit else None)
        t.notes.append(f"{corpus}: " + (f"CEG exponent alpha = {fit.alpha:.3f} (lower-envelope fit, "
                                         f"{fit.n} points, r2 {fit.r2:.2f})" if fit else f"no CEG: {why}"))
    if not data:
        raise Skip("no further corpus has a baseline and another method at one LR", [NEEDS])
    for i, row in enumerate(ctx.paper["web"]["rows"]):
        paper_row(t, row, KEYS, [Cell.num(row["ceg"], "{:.2f}", suffix="x")])
        t.rows[-1].rule_before = i == 0
    t.notes.append("Paper: " + ctx.paper["web"]["what"] + f" ({ctx.paper['web']['ref']}).")
    return [Output("table_web", ctx.write_table(t), dict(table=t, results=data))]
