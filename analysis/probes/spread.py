"""How far a depth read is from uniform (the claim "the routing queries left their initialisation").

At site s (N_s sources) and head h, with the token-averaged read w_{s,h}(n):
    TV_{s,h} = 1/2 sum_n |w_{s,h}(n) - 1/N_s|                       [..., site, head]
0 is the zero-initialised query's uniform read, 1 - 1/N_s a read of one source only. The spread of a
dataset is the mean of TV over sites with N_s >= 2 and over heads. Its random-query null is the same
per draw of matched-norm random queries: `null_read_spread` gives TV [draw, site, head] from either
stored form of the null (`analysis.probes.null_summary`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

#: the summary form's variable: TV of each null draw's read [draw, site, head]
NULL_READ_SPREAD = "null_read_spread"


def read_spread(weights: Any, sources: Any) -> np.ndarray:
    """TV from uniform per site and head: weights [..., site, source, head] (NaN where a site does
    not read that source), sources [site] -> [..., site, head] (float64)."""
    w = np.asarray(weights, dtype=float)  # [..., S, N_max, H]
    n = np.asarray(sources, dtype=float)  # [S]
    uniform = (1.0 / n)[:, None, None]  # [S, 1, 1]
    return 0.5 * np.nansum(np.abs(w - uniform), axis=-2)  # [..., S, H]


def mean_spread(tv: Any, sources: Any) -> Any:
    """Mean of TV [..., site, head] over sites with N >= 2 sources and over heads -> [...]."""
    keep = np.asarray(sources, dtype=float) >= 2
    return np.mean(np.asarray(tv)[..., keep, :], axis=(-2, -1))


def null_read_spread(ds: xr.Dataset) -> np.ndarray | None:
    """TV of each random-query draw's read [draw, site, head]: computed from the draws
    (`null_weight_mean`) or read from the summary form; None when the dataset has no null."""
    if NULL_READ_SPREAD in ds:
        return np.asarray(ds[NULL_READ_SPREAD].transpose("draw", "site", "head").values)
    if "null_weight_mean" in ds:
        return read_spread(ds["null_weight_mean"].transpose("draw", "site", "source", "head").values,
                           ds["site_num_sources"].values)
    return None
