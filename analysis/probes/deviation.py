"""Per-head deviation maps (paper Figure `fig:perhead`).

    wbar_h = E_p w_{s,h}(n | p),   wbar = mean_h wbar_h  (consensus over the heads the site has)
    D_h    = wbar_h - wbar                                  [site, source, head]
The null is the same map under matched-norm random queries (per draw). Replication r is the
Pearson correlation of D computed on the two halves of the text: whole documents alternate between
them (disjoint text, as the paper's r = 0.77) when the capture knew each token's document, else
rows alternate and the same documents feed both halves; `halves` says which;
the cross-head correlation is corr(D_h, D_h') over the (site, source) cells.

Replication has its own null: matched-norm random queries replicate too (the sources, not the
queries, carry most of a map's shape), so the same split-half r is computed for each null draw's
heads (`null_replication_r` [draw], from `null_weight_mean_half` [draw, half, site, source, head]
when the capture recorded it; NaN otherwise) and the trained r is read against it:
`replication_z` = (r - null mean) / null sd over draws.

Since sum_h D_h = 0, the off-diagonal correlations are tied: with equal variances their mean is
exactly -1/(H-1) (-1 at H = 2) whatever the heads do, so that mean is reported only beside its
reference. (A leave-one-out consensus changes nothing: w_h - mean_{h'!=h} w_h' = H/(H-1) D_h.)
What the constraint leaves free is how the correlations spread around their mean: independent
heads give off-diagonal r all near -1/(H-1), heads that share deviations in groups give r near
+1 within and -1 across groups. The test of "near-uncorrelated across heads" is that spread (the
RMS of the off-diagonal r about their mean) against the same spread under the matched-norm
random-query null (heads independent by construction, same sources and constraint; mean and sd
over draws): `cross_head_spread_z` = (spread - null mean) / null sd. The figure's caption shows it.

Every null statistic is a function of four numbers per draw (`null_deviation_draws`: max |D|, mean |D|,
cross-head spread, split-half r over the cells of the first `first_sites` sites), computed from the
capture's null maps or read from the summary form (`analysis.probes.null_summary`), which stores
those four per draw for `SUMMARY_FIRST_SITES`. The null's own maps (`null_deviation`) come only
from the draws form.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from mhar_probe.capture.errors import CaptureError

from .provenance import require_probes, with_provenance

#: the summary form's per-draw deviation statistics [dev_first_sites, draw], by statistic
NULL_DEV = {"max_abs": "null_dev_max_abs", "mean_abs": "null_dev_mean_abs",
            "cross_head_spread": "null_dev_cross_head_spread", "replication_r": "null_dev_replication_r"}
#: their coordinate: the `first_sites` each row was computed for (-1: every site)
DEV_SITES = "dev_first_sites"
#: the `first_sites` a summary keeps: the probes' and claims' default (10) and every site
SUMMARY_FIRST_SITES: tuple[int | None, ...] = (10, None)


def deviation(weights: xr.DataArray) -> xr.DataArray:
    """w_h - mean over heads (NaN-aware: a site's absent heads are NaN)."""
    return weights - weights.mean("head", skipna=True)


def _cells(ds: xr.Dataset, first_sites: int | None) -> np.ndarray:
    """[site, source, head] mask of the cells the statistics use."""
    keep = np.isfinite(ds.weight_mean.values)
    keep &= (ds.site_num_sources.values >= 2)[:, None, None]
    if first_sites is not None:
        keep[first_sites:] = False
    return keep


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    denom = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / denom) if denom > 0 else float("nan")


def _corr_matrix(vecs: np.ndarray) -> np.ndarray:
    """Pearson correlations [H, H] between the rows of `vecs` [H, cells]."""
    H = vecs.shape[0]
    return np.array([[_pearson(vecs[i], vecs[j]) for j in range(H)] for i in range(H)])


def _spread(corr: np.ndarray) -> float:
    """RMS of the off-diagonal correlations about their mean (0 at H = 2: the one pair is -1)."""
    off = corr[~np.eye(corr.shape[0], dtype=bool)]
    return float(np.sqrt(np.mean((off - off.mean()) ** 2)))


def _null_replication(ds: xr.Dataset, keep: np.ndarray) -> np.ndarray:
    """Split-half r of each null draw's deviation map [draw] ([NaN] without `null_weight_mean_half`)."""
    if "null_weight_mean_half" not in ds or ds.sizes["draw"] == 0:
        return np.array([np.nan])
    D = deviation(ds.null_weight_mean_half.transpose("draw", "half", "site", "source", "head")).values
    return np.array([_pearson(d[0][keep], d[1][keep]) for d in D])  # d: [half, site, source, head]


def _sites_key(first_sites: int | None) -> int:
    return -1 if first_sites is None else int(first_sites)


def null_deviation_draws(ds: xr.Dataset, first_sites: int | None = 10) -> dict[str, np.ndarray]:
    """Per random-query draw [draw]: max |D| and mean |D| over the statistics' cells, the spread of
    the cross-head r, and the split-half r; [NaN] where the dataset has no draws (and for the split-half
    r without the null's halves). From the draws (`null_weight_mean`, `null_weight_mean_half`) or the
    summary form; a summary without this `first_sites` raises `CaptureError`."""
    nan = np.array([np.nan])
    if NULL_DEV["max_abs"] in ds:
        key, have = _sites_key(first_sites), [int(v) for v in ds[DEV_SITES].values]
        if key not in have:
            show = lambda k: "every site" if k == -1 else f"the first {k} sites"  # noqa: E731
            raise CaptureError(f"this routing dataset keeps the random-query null as per-draw statistics for "
                               f"{' and '.join(map(show, have))} only, not {show(key)}; read it with one of "
                               f"those, or capture the run again for the null's maps")
        out = {k: np.asarray(ds[v].sel({DEV_SITES: key}).values) for k, v in NULL_DEV.items() if v in ds}
        out.setdefault("replication_r", nan)
        return {k: v if v.size else nan for k, v in out.items()}
    keep = _cells(ds, first_sites)
    common = keep.all(-1)  # [site, source]: the cells every head has
    H = ds.sizes["head"]
    maps = deviation(ds.null_weight_mean).values  # [draw, site, source, head]
    if not len(maps):
        return dict(max_abs=nan, mean_abs=nan, cross_head_spread=nan, replication_r=nan)
    return dict(max_abs=np.array([np.abs(d[keep]).max() for d in maps]),
                mean_abs=np.array([np.abs(d[keep]).mean() for d in maps]),
                cross_head_spread=np.array([_spread(_corr_matrix(np.stack([d[..., h][common] for h in range(H)])))
                                            for d in maps]),
                replication_r=_null_replication(ds, keep))


def per_head_deviation(ds: xr.Dataset, first_sites: int | None = 10) -> xr.Dataset:
    """Deviation maps, null maps and their summary statistics for a multi-head run."""
    if ds.sizes["head"] < 2:
        raise CaptureError(f"per-head deviation needs a multi-head run (H > 1); this dataset has "
                           f"method {ds.attrs.get('method')!r} with {ds.sizes['head']} head(s)")
    require_probes(ds, "per-head deviation")
    keep = _cells(ds, first_sites)
    D = deviation(ds.weight_mean)  # [site, source, head]
    D_half = deviation(ds.weight_mean_half)  # [half, site, source, head]
    Dv = D.values
    draws = int(ds.sizes.get("draw", 0))
    nd = null_deviation_draws(ds, first_sites)  # each [draw], or [NaN]
    null_max, null_mean_abs, null_spread, null_rep = (nd["max_abs"], nd["mean_abs"], nd["cross_head_spread"],
                                                      nd["replication_r"])
    h0, h1 = D_half.values
    H = ds.sizes["head"]
    # cross-head correlation over (site, source) cells every head has
    common = keep.all(-1)  # [site, source]
    vecs = np.stack([Dv[..., h][common] for h in range(H)])  # [H, cells]
    corr = _corr_matrix(vecs)
    off = corr[~np.eye(H, dtype=bool)]
    spread = _spread(corr)
    # null_spread: the same spread for the random-query null's heads (independent by construction)
    null_sd = float(null_spread.std(ddof=1)) if null_spread.size > 1 else float("nan")
    rep = _pearson(h0[keep], h1[keep])
    rep_sd = float(null_rep.std(ddof=1)) if null_rep.size > 1 else float("nan")
    null_maps = {"null_deviation": deviation(ds.null_weight_mean)} if "null_weight_mean" in ds else {}
    out = xr.Dataset(
        {
            "deviation": D,
            **null_maps,  # [draw, site, source, head]: the draws form only
            "max_abs": float(np.abs(Dv[keep]).max()),
            "mean_abs": float(np.abs(Dv[keep]).mean()),
            "null_max_abs": ("draw", null_max) if draws else float("nan"),
            "null_max_abs_mean": float(null_max.mean()),
            "null_max_abs_std": float(null_max.std(ddof=1)) if null_max.size > 1 else float("nan"),
            "null_mean_abs_mean": float(null_mean_abs.mean()),
            "replication_r": rep,
            "null_replication_r": ("draw", null_rep) if draws and null_rep.size == draws else float("nan"),
            "null_replication_r_mean": float(null_rep.mean()) if null_rep.size else float("nan"),
            "null_replication_r_std": rep_sd,
            "replication_z": (rep - float(null_rep.mean())) / rep_sd if rep_sd > 0 else float("nan"),
            "cross_head_corr": (("head", "head_b"), corr),
            "cross_head_corr_mean": float(off.mean()),
            "cross_head_corr_independent": -1.0 / (H - 1),
            "cross_head_spread": spread,
            "cross_head_spread_null": ("draw", null_spread) if draws else float("nan"),
            "cross_head_spread_null_mean": float(null_spread.mean()),
            "cross_head_spread_null_std": null_sd,
            "cross_head_spread_z": (spread - float(null_spread.mean())) / null_sd if null_sd > 0 else float("nan"),
            "cells": int(keep.sum()),
        },
        coords={"head_b": np.arange(H)},
    )
    out.attrs["first_sites"] = -1 if first_sites is None else int(first_sites)
    out.attrs["halves"] = str(ds.attrs.get("halves", "rows (sample index mod 2: the same documents in both halves)"))
    return with_provenance(out, "per_head_deviation", [ds])
